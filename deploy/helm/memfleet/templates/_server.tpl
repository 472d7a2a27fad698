{{/*
A pool of memfleet servers: its headless Service, StatefulSet and PodDisruptionBudget. Used
for the main pool (component "server") and the gutter (component "gutter"):
  (dict "root" $ "component" "server" "name" NAME "replicas" N "memoryMiB" M "threads" T)
Everything else comes from .Values.server.
*/}}

{{- define "memfleet.serverPool" -}}
{{- $root := .root -}}
{{- $s := $root.Values.server -}}
{{- $ctx := dict "root" $root "component" .component -}}
{{- $memMiB := include "memfleet.serverMemoryMiB" (dict "root" $root "memoryMiB" .memoryMiB) -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "memfleet.labels" $ctx | nindent 4 }}
  {{- with $s.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  # Headless: DNS answers every pod (A records and the SRV record
  # _memcache._tcp.<name>.<namespace>.svc.<clusterDomain>, one target per pod).
  clusterIP: None
  # A pod that is restarting stays in the SRV answer, so the routers keep its place on the
  # ring (its keys wait for it, the gutter serves them meanwhile) instead of moving ~1/N of
  # the keys away and back.
  publishNotReadyAddresses: true
  selector:
    {{- include "memfleet.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: memcache
      port: {{ $s.port }}
      targetPort: memcache
      protocol: TCP
    - name: metrics
      port: {{ $s.metricsPort }}
      targetPort: metrics
      protocol: TCP
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "memfleet.labels" $ctx | nindent 4 }}
spec:
  serviceName: {{ .name }}
  replicas: {{ .replicas }}
  podManagementPolicy: {{ $s.podManagementPolicy }}
  minReadySeconds: {{ $s.minReadySeconds }}
  updateStrategy:
    {{- if not (has $s.updateStrategy (list "RollingUpdate" "OnDelete")) }}
    {{- fail (printf "server.updateStrategy must be RollingUpdate or OnDelete, not %v" $s.updateStrategy) }}
    {{- end }}
    type: {{ $s.updateStrategy }}
  selector:
    matchLabels:
      {{- include "memfleet.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "memfleet.labels" $ctx | nindent 8 }}
        {{- with $s.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $annotations := include "memfleet.metricsAnnotations" (dict "root" $root "port" $s.metricsPort) | trim }}
      {{- with $s.podAnnotations }}
      {{- $annotations = printf "%s\n%s" $annotations (toYaml .) | trim }}
      {{- end }}
      {{- with $annotations }}
      annotations:
        {{- . | nindent 8 }}
      {{- end }}
    spec:
      {{- include "memfleet.podCommon" $root | nindent 6 }}
      terminationGracePeriodSeconds: {{ $s.terminationGracePeriodSeconds }}
      {{- with $s.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- if $s.affinity }}
      affinity:
        {{- toYaml $s.affinity | nindent 8 }}
      {{- else if eq $s.podAntiAffinity "soft" }}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- include "memfleet.selectorLabels" $ctx | nindent 20 }}
      {{- else if eq $s.podAntiAffinity "hard" }}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  {{- include "memfleet.selectorLabels" $ctx | nindent 18 }}
      {{- else if ne $s.podAntiAffinity "none" }}
      {{- fail (printf "server.podAntiAffinity must be soft, hard or none, not %v" $s.podAntiAffinity) }}
      {{- end }}
      {{- with $s.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $s.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $s.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: server
          image: {{ include "memfleet.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - server
            - --listen=0.0.0.0
            - --port={{ $s.port }}
            - --memory-limit={{ .memoryMiB }}
            - --threads={{ .threads }}
            - --max-connections={{ $s.maxConnections }}
            - --max-item-size={{ $s.maxItemSize }}
            - --admin-port={{ $s.metricsPort }}
            {{- if $s.warmRestart.enabled }}
            - --memory-file={{ $s.warmRestart.mountPath }}/heap
            {{- end }}
            {{- if $s.disableFlushAll }}
            - --disable-flush-all
            {{- end }}
            {{- with (include "memfleet.listenerSecurityArgs" $root) }}{{ . | trim | nindent 12 }}{{- end }}
            {{- with $s.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $s.extraEnv }}
          env:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: memcache
              containerPort: {{ $s.port }}
              protocol: TCP
            - name: metrics
              containerPort: {{ $s.metricsPort }}
              protocol: TCP
          {{- if $s.startupProbe.enabled }}
          startupProbe:
            httpGet:
              path: /metrics
              port: metrics
            periodSeconds: {{ $s.startupProbe.periodSeconds }}
            failureThreshold: {{ $s.startupProbe.failureThreshold }}
          {{- end }}
          readinessProbe:
            tcpSocket:
              port: memcache
            periodSeconds: {{ $s.readinessProbe.periodSeconds }}
            timeoutSeconds: {{ $s.readinessProbe.timeoutSeconds }}
            failureThreshold: {{ $s.readinessProbe.failureThreshold }}
          livenessProbe:
            httpGet:
              path: /metrics
              port: metrics
            periodSeconds: {{ $s.livenessProbe.periodSeconds }}
            timeoutSeconds: {{ $s.livenessProbe.timeoutSeconds }}
            failureThreshold: {{ $s.livenessProbe.failureThreshold }}
          resources:
            {{- if $s.resources }}
            {{- toYaml $s.resources | nindent 12 }}
            {{- else }}
            requests:
              cpu: {{ $s.cpu.request }}
              memory: {{ $memMiB }}Mi
            limits:
              {{- with $s.cpu.limit }}
              cpu: {{ . }}
              {{- end }}
              memory: {{ $memMiB }}Mi
            {{- end }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          {{- if or $s.warmRestart.enabled $root.Values.tls.enabled $root.Values.auth.enabled }}
          volumeMounts:
            {{- if $s.warmRestart.enabled }}
            - name: memory-file
              mountPath: {{ $s.warmRestart.mountPath }}
            {{- end }}
            {{- with (include "memfleet.secretMounts" $root) }}{{ . | trim | nindent 12 }}{{- end }}
          {{- end }}
      {{- if or $s.warmRestart.enabled $root.Values.tls.enabled $root.Values.auth.enabled }}
      volumes:
        {{- if $s.warmRestart.enabled }}
        # tmpfs: the item memory itself (the heap is a shared mapping of the file). It lives
        # as long as the pod, so a container restarted in place comes back warm; its pages
        # are charged to the pod's memory (once), within the limit above.
        - name: memory-file
          emptyDir:
            medium: Memory
            sizeLimit: {{ $memMiB }}Mi
        {{- end }}
        {{- with (include "memfleet.secretVolumes" $root) }}{{ . | trim | nindent 8 }}{{- end }}
      {{- end }}
{{- if $s.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "memfleet.labels" $ctx | nindent 4 }}
spec:
  maxUnavailable: {{ $s.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "memfleet.selectorLabels" $ctx | nindent 6 }}
{{- end }}
{{- end -}}
