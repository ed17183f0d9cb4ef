{{- define "voxlane.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "voxlane.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "voxlane.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The headless service that names each Triton pod: <pod>.<this>.<namespace>.svc */}}
{{- define "voxlane.tritonPods" -}}
{{ include "voxlane.fullname" . }}-triton-pods
{{- end -}}

{{/* host:port of every Triton pod, for the gateway (port is "grpc" or "metrics") */}}
{{- define "voxlane.tritonAddresses" -}}
{{- $root := .root -}}
{{- $port := index $root.Values.triton.ports .port -}}
{{- $list := list -}}
{{- range $i := until (int $root.Values.triton.gpus) -}}
{{- $list = append $list (printf "%s-triton-%d.%s.%s.svc:%d" (include "voxlane.fullname" $root) $i (include "voxlane.tritonPods" $root) $root.Release.Namespace (int $port)) -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}
