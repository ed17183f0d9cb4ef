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

{{/* A Triton pod's labels (dict: root, group): its selector; a group's pods also carry their group's name */}}
{{- define "voxlane.tritonLabels" -}}
{{ include "voxlane.selector" .root }}
app.kubernetes.io/component: triton
{{- with .group }}
voxlane.io/model: {{ .name }}
{{- end }}
{{- end -}}

{{/* What a Triton pod serves (dict: root, group): its group's preset or checkpoint, else `model` */}}
{{- define "voxlane.servedModel" -}}
{{- with .group -}}
{{- if and .preset .checkpoint -}}
{{- fail (printf "models[%s]: give a preset or a checkpoint, not both" .name) -}}
{{- end -}}
{{- required (printf "models[%s]: a preset or a checkpoint" .name) (.preset | default .checkpoint) -}}
{{- else -}}
{{- .root.Values.model -}}
{{- end -}}
{{- end -}}

{{/* A group's objects (dict: root, group): <release>-voxlane-<name>; its headless Service adds -pods */}}
{{- define "voxlane.groupName" -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" (toString .group.name)) -}}
{{- fail (printf "models: name %q is not a DNS label (lower case letters, digits, '-')" (toString .group.name)) -}}
{{- end -}}
{{- printf "%s-%s" (include "voxlane.fullname" .root) .group.name | trunc 57 | trimSuffix "-" -}}
{{- end -}}

{{/* A group's headless Service: its ready pods' addresses, which the gateway resolves (--triton-dns) */}}
{{- define "voxlane.groupPods" -}}
{{ include "voxlane.groupName" . }}-pods
{{- end -}}

{{/* Seconds a leaving pod may take: leave the gateways' view, let its longest stream end, stop */}}
{{- define "voxlane.graceSeconds" -}}
{{- $drain := .Values.drain -}}
{{- add (int $drain.leaveSeconds) (int (ceil $drain.maxAudioSeconds)) (int $drain.stopSeconds) -}}
{{- end -}}

{{/* The preStop hook (dict: root, port, metric): `voxlane drain` waits for `metric` on this pod to reach 0 */}}
{{- define "voxlane.drainCommand" -}}
{{- $drain := .root.Values.drain -}}
- {{ .root.Values.image.voxlane }}
- drain
- --metrics-url=http://127.0.0.1:{{ .port }}/metrics
- --metric={{ .metric }}
- --leave-s={{ $drain.leaveSeconds }}
- --timeout-s={{ ceil $drain.maxAudioSeconds }}
{{- end -}}

{{/* A Python list of each server group's readiness URL (one address per group), for the gateway's init container */}}
{{- define "voxlane.tritonReadyUrls" -}}
{{- $root := . -}}
{{- $hosts := list (printf "%s-triton" (include "voxlane.fullname" $root)) -}}
{{- if $root.Values.models -}}
{{- $hosts = list -}}
{{- range $root.Values.models -}}
{{- $hosts = append $hosts (include "voxlane.groupName" (dict "root" $root "group" .)) -}}
{{- end -}}
{{- end -}}
{{- $urls := list -}}
{{- range $hosts -}}
{{- $urls = append $urls (printf "%q" (printf "http://%s.%s.svc:%d/v2/health/ready" . $root.Release.Namespace (int $root.Values.triton.ports.http))) -}}
{{- end -}}
[{{ join ", " $urls }}]
{{- end -}}

{{/* Non-empty where gateway pods come and go on their own (server groups, autoscaling): each drains on its way out */}}
{{- define "voxlane.gatewayDrains" -}}
{{- if or .Values.models .Values.autoscaling.enabled }}true{{ end -}}
{{- end -}}

{{/* The PromQL label matchers of one group's servers (dict: root, group), as the ServiceMonitor labels them */}}
{{- define "voxlane.groupMatchers" -}}
namespace="{{ .root.Release.Namespace }}",service="{{ include "voxlane.groupPods" . }}"
{{- end -}}

{{/* A group's load in servers' worth (dict: root, group): the KEDA query; ceil(it / target) servers are asked for */}}
{{- define "voxlane.groupQuery" -}}
{{- $matchers := include "voxlane.groupMatchers" . -}}
{{- if eq .root.Values.autoscaling.signal "streams" -}}
sum(voxlane_live_requests{ {{- $matchers -}} }) / avg(voxlane_admission_limit{ {{- $matchers -}} })
{{- else if eq .root.Values.autoscaling.signal "busy" -}}
sum(1 - rate(voxlane_lm_idle_seconds_total{ {{- $matchers -}} }[1m]))
{{- else -}}
{{- fail (printf "autoscaling.signal must be streams or busy, got %q" .root.Values.autoscaling.signal) -}}
{{- end -}}
{{- end -}}

{{/* The per-pod metric the Prometheus adapter serves for the chosen signal (rules: prometheus-adapter-rules.yaml) */}}
{{- define "voxlane.podMetric" -}}
{{- if eq .Values.autoscaling.signal "busy" }}voxlane_lm_busy_share{{ else }}voxlane_stream_share{{ end -}}
{{- end -}}

{{/* The target of the chosen signal, per server */}}
{{- define "voxlane.target" -}}
{{- $target := index .Values.autoscaling.targets .Values.autoscaling.signal -}}
{{- if not (and $target (gt (float64 $target) 0.0) (le (float64 $target) 1.0)) -}}
{{- fail (printf "autoscaling.targets.%s must be in (0, 1]" .Values.autoscaling.signal) -}}
{{- end -}}
{{- $target -}}
{{- end -}}

{{/* How fast a scaled Deployment follows its ask: out at once, in after a window and a pod or two a minute */}}
{{- define "voxlane.scaleBehavior" -}}
scaleUp:
  stabilizationWindowSeconds: 0
  selectPolicy: Max
  policies:
    - {type: Percent, value: 100, periodSeconds: 15}
    - {type: Pods, value: 4, periodSeconds: 15}
scaleDown:
  stabilizationWindowSeconds: {{ .Values.autoscaling.scaleInWindowSeconds }}
  selectPolicy: Max
  policies:
    - {type: Pods, value: {{ .Values.autoscaling.scaleInPodsPerMinute }}, periodSeconds: 60}
{{- end -}}
