"""The core's shortcuts: answers a cycle takes from the last one instead of working them out
again, each exactly what the phases would decide.

- `memo`: victim searches that failed, settled while nothing that could change their answer
  has happened (`SearchMemo`, carried from cycle to cycle in `Snapshot.memo` and
  `Decisions.memo`);
- `searches`: one cycle's search cache (`CycleContext.caches.searches`): the memo's
  failures still settled and those the cycle adds, a quiet check's answers handed to the
  phases;
- `quiet`: a cycle that decided nothing, recorded so that the next one, when nothing but
  time and pending arrivals changed, is answered without running the phases. Only a policy
  with `Policy.remembers_quiet_cycles` (`CALDERA`) records and replays them.

None of this decides anything: a cycle decides the same with and without it
(tests/sim/test_memo.py). The decision modules only consult the memo through the cycle
context; the quiet-cycle machinery is called from `core/cycle.py` alone.

Nothing is imported here: `memo` and `searches` sit below the cycle context, which imports
them, and `quiet` above the phases, which it runs.
"""

__all__: list[str] = []
