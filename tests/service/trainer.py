"""A stand-in for training code, driven by the tests: counts steps, checkpoints on SIGTERM
through caldera.sdk.preemption, resumes from its checkpoint file.

usage: trainer.py TOTAL_STEPS STEP_SECONDS [CHECKPOINT_SECONDS]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# Run by Debian's python3 when the test's own interpreter is out of the job account's reach
# (service_support.JOB_PYTHON): caldera.sdk.preemption needs only the standard library.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from caldera.sdk import preemption


def main() -> int:
    total = int(sys.argv[1])
    pause = float(sys.argv[2])
    checkpoint_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    saved = preemption.checkpoint_dir() / "step.txt"
    step = int(saved.read_text()) if saved.exists() else 0
    print(f"resumed from step {step}" if step else "fresh start", flush=True)
    while step < total:
        time.sleep(pause)
        step += 1
        preemption.report_progress(step / total)
        if preemption.should_stop():
            print(f"SIGTERM at step {step}", flush=True)
            time.sleep(checkpoint_seconds)  # writing the emergency checkpoint
            saved.write_text(str(step))
            preemption.report_checkpoint(step)
            print(f"checkpoint {step}", flush=True)
            return 143
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
