{{/* Names and labels. */}}
{{- define "caldera.fullname" -}}
{{- printf "%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "caldera.labels" -}}
app.kubernetes.io/name: caldera
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "caldera.selector" -}}
app.kubernetes.io/name: caldera
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "caldera.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* caldera.yaml: the values' config with the state namespace set to the release's. */}}
{{- define "caldera.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $kube := get $config "kubernetes" | default dict -}}
{{- $_ := set $kube "state_namespace" .Release.Namespace -}}
{{- $_ := set $kube "pod_security" (include "caldera.podSecurity" .) -}}
{{- $_ := set $config "kubernetes" $kube -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The served namespaces' Pod Security level: namespaces.podSecurity (restricted by
default); "" labels no namespace, and caldera keeps its own floor, baseline. */}}
{{- define "caldera.podSecurity" -}}
{{- $level := .Values.namespaces.podSecurity | default "baseline" -}}
{{- if not (has $level (list "baseline" "restricted")) -}}
{{- fail (printf "namespaces.podSecurity must be restricted, baseline or \"\", not %q" $level) -}}
{{- end -}}
{{- $level -}}
{{- end -}}

{{- define "caldera.cel.podSecurity" -}}
{{- include "caldera.podSecurity" . | toJson -}}
{{- end -}}

{{- define "caldera.bindings" -}}
{{- (.Values.config.kubernetes | default dict).namespaces | default dict | toJson -}}
{{- end -}}

{{/* The admission policy's CEL literals, from the namespace bindings (JSON is CEL). */}}
{{- define "caldera.cel.namespaces" -}}
{{- include "caldera.bindings" . | fromJson | keys | sortAlpha | toJson -}}
{{- end -}}

{{- define "caldera.cel.critical" -}}
{{- $out := list -}}
{{- range $name, $binding := include "caldera.bindings" . | fromJson -}}
{{- if $binding.critical }}{{ $out = append $out $name }}{{ end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{- define "caldera.cel.queues" -}}
{{- $out := dict -}}
{{- range $name, $binding := include "caldera.bindings" . | fromJson -}}
{{- $_ := set $out $name $binding.queues -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{- define "caldera.cel.accounts" -}}
{{- $out := dict -}}
{{- range $name, $binding := include "caldera.bindings" . | fromJson -}}
{{- $_ := set $out $name ($binding.service_accounts | default (list "default")) -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}
