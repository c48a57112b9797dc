{{/*
The extender's container: in its own Deployment (layout service), or beside kube-scheduler in
the scheduler's pod (layout sidecar, extender mode: the verbs on the pod's loopback).
*/}}
{{- define "escher-extender.container" -}}
{{- $fullname := include "escher-extender.fullname" . -}}
{{- $extenderMode := eq .Values.mode "extender" -}}
{{- $sidecar := include "escher-extender.sidecar" . -}}
{{- $port := ternary "policy" "https" (not (empty $sidecar)) -}}
{{- $api := include "escher-extender.kubeAPI" (list $ "extender") | fromJson -}}
- name: extender
  image: {{ include "escher-extender.imageRef" (list .Values.image .Chart.AppVersion) }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # The image's entrypoint is `escher-extender serve`; it listens on 0.0.0.0 (in the sidecar
  # layout the verbs on 127.0.0.1).
  args:
    - --in-cluster
    - --port=8888
    - --tls-cert-file=/etc/escher-extender/tls/tls.crt
    - --tls-key-file=/etc/escher-extender/tls/tls.key
    - --log-json
    {{- if .Values.leaderElection.enabled }}
    - --leader-elect
    - --lease-namespace={{ .Release.Namespace }}
    - --lease-name={{ $fullname }}
    {{- end }}
    - --mode={{ .Values.mode }}
    {{- if eq .Values.mode "dra" }}
    - --dra-max-slices={{ .Values.dra.maxSlices }}
    {{- if .Values.dra.skipNodeOperations }}
    - --dra-skip-node-operations
    {{- end }}
    {{- end }}
    {{- if $extenderMode }}
    {{- if .Values.gangGate.enabled }}
    # The adaptive gang gate's switch (gang-gate-policy.yaml).
    - --gang-gate-switch={{ .Release.Namespace }}/{{ .Values.gangGate.switchConfigMap }}
    {{- end }}
    {{- if not .Values.gangs.nominate }}
    - --no-gang-nominate
    {{- end }}
    # Below the bind entry's httpTimeout in the scheduler's configuration (+15 s).
    - --gang-wait-seconds={{ .Values.gangs.waitSeconds }}
    - --verbs-port=8889
    {{- if $sidecar }}
    # On the pod's loopback, plain HTTP: only the containers of this pod reach it.
    - --verbs-host=127.0.0.1
    - --verbs-plain
    {{- else }}
    # kube-scheduler's verbs on their own listener, mutual TLS: only a client
    # certificate signed by the CA in the scheduler's client Secret gets an answer.
    - --verbs-client-ca-file=/etc/escher-extender/client-ca/ca.crt
    # The same verbs over HTTP/1.1 beside 8889's HTTP/2, with its TLS: filter and
    # prioritize come one pod at a time, and HTTP/1.1 is cheaper per call (verbsHTTP1URL).
    - --verbs-http1-port=8890
    {{- end }}
    {{- end }}
    - --resource-domain={{ .Values.resourceDomain }}
    - --gang-topology={{ .Values.gangs.topology }}
    {{- if not .Values.policyObjects }}
    - --no-policy-objects
    {{- end }}
    - --kube-qps={{ $api.qps }}
    - --kube-burst={{ $api.burst }}
  env:
    # The policy API's bearer token: from a Secret, never on the command line.
    - name: ESCHER_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ include "escher-extender.tokenSecret" . }}
          key: token
    # Slow clients, on every listener (connections; docs/deployment.md, "Slow clients").
    - name: ESCHER_HEADER_TIMEOUT_SECONDS
      value: {{ .Values.connections.headerTimeoutSeconds | quote }}
    - name: ESCHER_BODY_TIMEOUT_SECONDS
      value: {{ .Values.connections.bodyTimeoutSeconds | quote }}
    - name: ESCHER_MAX_PENDING_CONNECTIONS
      value: {{ .Values.connections.maxPending | quote }}
  ports:
    # In the sidecar layout `https` is kube-scheduler's port of the pod.
    - name: {{ $port }}
      containerPort: 8888
    {{- if and $extenderMode (not $sidecar) }}
    - name: verbs
      containerPort: 8889
    - name: verbs-http1
      containerPort: 8890
    {{- end }}
  # The kubelet probes over HTTPS without verifying the certificate.
  livenessProbe:
    # The process answers; independent of the API server, so an API outage does not
    # turn into restarts.
    httpGet:
      path: /healthz
      port: {{ $port }}
      scheme: HTTPS
    periodSeconds: 10
    timeoutSeconds: 2
    failureThreshold: 3
  readinessProbe:
    # Ready once the ledger is rebuilt from the cluster and this replica leads.
    # Every second: a new leader joins the Service within a second of winning the
    # lease, and a deposed or paused one leaves it within two.
    httpGet:
      path: /readyz
      port: {{ $port }}
      scheme: HTTPS
    periodSeconds: 1
    timeoutSeconds: 1
    failureThreshold: 2
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if $sidecar }}
    runAsUser: 10001  # the image's USER; the pod's default is kube-scheduler's
    runAsGroup: 10001
    {{- end }}
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: tls
      mountPath: /etc/escher-extender/tls
      readOnly: true
    {{- if and $extenderMode (not $sidecar) }}
    - name: client-ca
      mountPath: /etc/escher-extender/client-ca
      readOnly: true
    {{- end }}
{{- end }}
