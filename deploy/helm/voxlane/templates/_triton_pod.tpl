{{/*
A Triton pod's template: one GPU, one whole VoxLane (`voxlane serve`: the MPS daemon, then tritonserver with the
lanes). Arguments: `root` (the chart's context) and `group`: an entry of `models` (its own model, labels, drain on
the way out), or nil for the single group that `model` and `triton.gpus` describe.
*/}}
{{- define "voxlane.tritonPodTemplate" -}}
{{- $root := .root -}}
{{- $group := .group -}}
{{- $values := $root.Values -}}
metadata:
  labels:
    {{- include "voxlane.tritonLabels" . | nindent 4 }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: {{ $values.triton.ports.metrics | quote }}
    prometheus.io/path: /metrics
spec:
  {{- if $group }}
  # a leaving pod first drains (preStop: new streams go elsewhere, its own end by themselves), then stops
  terminationGracePeriodSeconds: {{ include "voxlane.graceSeconds" $root }}
  {{- else }}
  terminationGracePeriodSeconds: 60  # `voxlane serve` stops tritonserver, then quits the MPS daemon
  {{- end }}
  containers:
    - name: triton
      image: "{{ $values.image.repository }}:{{ $values.image.tag }}"
      imagePullPolicy: {{ $values.image.pullPolicy }}
      command:
        - {{ $values.image.voxlane }}
        - serve
        - --device={{ $values.triton.device }}
        - --model={{ include "voxlane.servedModel" . }}
        - --mode={{ $values.mode }}
        - --partition={{ if $values.triton.mps }}mps{{ else }}none{{ end }}
        - --lm-sm-pct={{ $values.triton.lmSmPct }}
        - --codec-sm-pct={{ $values.triton.codecSmPct }}
        - --http-port={{ $values.triton.ports.http }}
        - --grpc-port={{ $values.triton.ports.grpc }}
        - --metrics-port={{ $values.triton.ports.metrics }}
        - --triton-host=0.0.0.0  # the gateway pods reach it; its repository API is closed (no key on a command line)
        {{- if $group }}
        - --max-audio-seconds={{ $values.drain.maxAudioSeconds }}  # no stream outlasts the drain
        {{- end }}
        {{- if $values.triton.voicesClaim }}
        - --data-dir=/var/lib/voxlane
        {{- end }}
        {{- range $values.triton.extraArgs }}
        - {{ . | quote }}
        {{- end }}
        {{- if $group }}
        {{- range $group.extraArgs }}
        - {{ . | quote }}
        {{- end }}
        {{- end }}
      {{- with $values.auth.existingSecret }}
      env:
        - name: VOXLANE_ADMIN_KEYS  # Triton's repository API (load, unload, index) takes the first one
          valueFrom: {secretKeyRef: {name: {{ . }}, key: admin-keys, optional: true}}
      {{- end }}
      ports:
        - {name: http, containerPort: {{ $values.triton.ports.http }}}
        - {name: grpc, containerPort: {{ $values.triton.ports.grpc }}}
        - {name: metrics, containerPort: {{ $values.triton.ports.metrics }}}
      startupProbe:
        httpGet: {path: /v2/health/live, port: http}
        periodSeconds: 10
        failureThreshold: {{ div $values.triton.startupSeconds 10 }}
      livenessProbe:
        httpGet: {path: /v2/health/live, port: http}
        periodSeconds: 10
        failureThreshold: 3
      readinessProbe:  # every model loaded: a lane whose stub died is unloaded, so this turns false
        httpGet: {path: /v2/health/ready, port: http}
        periodSeconds: 5
        failureThreshold: 2
      {{- if $group }}
      lifecycle:
        preStop:  # wait out the streams this server holds (docs/DEPLOY.md, "Scaling out")
          exec:
            command:
              {{- include "voxlane.drainCommand" (dict "root" $root "port" $values.triton.ports.metrics "metric" "voxlane_live_requests") | nindent 14 }}
      {{- end }}
      resources:
        {{- toYaml $values.triton.resources | nindent 8 }}
      volumeMounts:
        - {name: dshm, mountPath: /dev/shm}
        - {name: cache, mountPath: /root/.cache}
        {{- if $values.triton.voicesClaim }}
        - {name: voices, mountPath: /var/lib/voxlane}
        {{- end }}
  volumes:
    - name: dshm
      emptyDir: {medium: Memory, sizeLimit: {{ $values.triton.shmSize }}}
    - name: cache  # materialised presets and compiled kernels
      emptyDir: {}
    {{- if $values.triton.voicesClaim }}
    - name: voices  # registered voices, shared by every pod and kept across restarts
      persistentVolumeClaim: {claimName: {{ $values.triton.voicesClaim | quote }}}
    {{- end }}
  {{- with $values.triton.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $values.triton.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $values.triton.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
