{{/* Names, labels and the pieces every workload shares. */}}

{{- define "memfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* {release}-{chart}, or the release alone when it already holds the chart's name. Kept
short enough for "-gutter", "-router" and "-invalidator" suffixes and pod ordinals. */}}
{{- define "memfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "memfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "memfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "server") */}}
{{- define "memfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memfleet.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "memfleet.labels" -}}
{{ include "memfleet.selectorLabels" . }}
helm.sh/chart: {{ include "memfleet.chart" .root }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: memfleet
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The DNS suffix of the release's namespace: <namespace>.svc.<clusterDomain> */}}
{{- define "memfleet.svcDomain" -}}
{{- printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* A pool's servers entry: the SRV name of a headless Service (dict "root" $ "service" NAME) */}}
{{- define "memfleet.dnssrv" -}}
{{- printf "dnssrv+_memcache._tcp.%s.%s" .service (include "memfleet.svcDomain" .root) -}}
{{- end -}}

{{/* Memory of a server pod, MiB: -m + -m * overheadPercent / 100 + fixedMiB. (dict "root" $ "memoryMiB" N) */}}
{{- define "memfleet.serverMemoryMiB" -}}
{{- $m := int64 .memoryMiB -}}
{{- $v := .root.Values.server.memory -}}
{{- $percent := $v.overheadPercent -}}
{{- if or (kindIs "invalid" $percent) (eq (toString $percent) "") -}}
{{- $percent = ternary 60 25 .root.Values.server.warmRestart.enabled -}}
{{- end -}}
{{- add $m (div (mul $m (int64 $percent)) 100) (int64 $v.fixedMiB) -}}
{{- end -}}

{{- define "memfleet.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod-level settings every workload shares. */}}
{{- define "memfleet.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- include "memfleet.imagePullSecrets" . }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Prometheus annotations for a pod whose metrics are on PORT: (dict "root" $ "port" N) */}}
{{- define "memfleet.metricsAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Volumes for TLS and auth Secrets (every memfleet component mounts the same). */}}
{{- define "memfleet.secretVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ required "tls.existingSecret is required with tls.enabled" .Values.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.auth.enabled }}
- name: auth
  secret:
    secretName: {{ required "auth.existingSecret is required with auth.enabled" .Values.auth.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "memfleet.secretMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/memfleet/tls
  readOnly: true
{{- end }}
{{- if .Values.auth.enabled }}
- name: auth
  mountPath: /etc/memfleet/auth
  readOnly: true
{{- end }}
{{- end -}}

{{/* The flags that serve TLS and auth to clients (server and router alike). */}}
{{- define "memfleet.listenerSecurityArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-cert=/etc/memfleet/tls/tls.crt
- --tls-key=/etc/memfleet/tls/tls.key
- --tls-ca=/etc/memfleet/tls/ca.crt
{{- if .Values.tls.verifyClient }}
- --tls-verify-client
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
- --auth-file=/etc/memfleet/auth/{{ .Values.auth.authFileKey }}
{{- end }}
{{- end -}}

{{/* TOML keys a pool needs to reach memfleet listeners of this release (TLS, auth). */}}
{{- define "memfleet.poolSecurityToml" -}}
{{- if .Values.tls.enabled }}
tls = true
tls_ca = "/etc/memfleet/tls/ca.crt"
{{- with .Values.tls.serverName }}
tls_server_name = {{ . | quote }}
{{- end }}
{{- if .Values.tls.verifyClient }}
tls_cert = "/etc/memfleet/tls/tls.crt"
tls_key = "/etc/memfleet/tls/tls.key"
{{- end }}
{{- end }}
{{- if .Values.auth.enabled }}
auth_user = {{ .Values.auth.user | quote }}
auth_password_file = "/etc/memfleet/auth/{{ .Values.auth.passwordKey }}"
{{- end }}
{{- end -}}

{{/* The router's pool settings, TOML. */}}
{{- define "memfleet.poolToml" -}}
{{- $p := .Values.router.pool -}}
distribution = {{ $p.distribution | quote }}
hash = {{ $p.hash | quote }}
timeout_ms = {{ int64 $p.timeoutMs }}
server_connections = {{ int64 $p.serverConnections }}
server_failure_limit = {{ int64 $p.serverFailureLimit }}
server_retry_timeout_ms = {{ int64 $p.serverRetryTimeoutMs }}
spool_deletes = {{ $p.spoolDeletes }}
{{- include "memfleet.poolSecurityToml" . }}
{{- end -}}
