{{/*
escher-scheduler's KubeSchedulerConfiguration: deploy/overlays/<mode>/scheduler-config.yaml,
with the names, the domain, the scope and the API budget from the values.
*/}}
{{- define "escher-extender.schedulerConfig" -}}
{{- $scheduler := include "escher-extender.schedulerName" . -}}
{{- $api := include "escher-extender.kubeAPI" (list $ "scheduler") | fromJson -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
# No clientConnection.kubeconfig: the pod's ServiceAccount. The API budget (kubeAPI).
clientConnection:
{{- if eq .Values.mode "dra" }}
  # In dra mode a pod of an ephemeral resource costs about 7 API writes (its claim created,
  # finalized and allocated; its status twice; the binding; an event) against 2: raise
  # kubeAPI.scheduler on a busy cluster (docs/deployment.md, "Dra mode").
{{- end }}
  qps: {{ $api.qps }}
  burst: {{ $api.burst }}
leaderElection:
  leaderElect: true
  # Its own lease: it never competes with the default scheduler for kube-system/kube-scheduler.
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ $scheduler }}
{{- if eq .Values.mode "extender" }}
# A pod whose exchange failed (no extender leader: a failover) is tried again after 1 s, not
# after kube-scheduler's backoff doubling from 1 s to 10 s, which kept a pod created when the
# leader stopped waiting 4-9 s after a new one led (docs/operations.md, "Replicas and
# failover"). The cost: an unschedulable pod that an event requeues waits 1 s, not up to
# 10 s, before its next try when kube-scheduler is busy.
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
{{- end }}
{{- if and (eq .Values.mode "extender") (eq .Values.scope "every-pod") }}
# Every pod goes to the extender: every feasible node is sent to it
# (scheduler-config/extender.yaml says why).
percentageOfNodesToScore: 100
{{- end }}
profiles:
  # NodeResourcesFit checks the ephemeral resources written back to the nodes like any
  # extended resource; in extender mode the extender's ledger has the last word for the pods
  # it is sent. With scope split, this profile keeps kube-scheduler's adaptive sampling: the
  # pods that need no exchange are placed as kube-scheduler alone places them.
  - schedulerName: {{ $scheduler }}
{{- if and (eq .Values.mode "extender") (eq .Values.scope "split") }}
  # The pods the extender decides (gang members, preferences), moved here by the marker
  # policy: every feasible node is looked at, so a gang member's reserved node, or the one
  # node of a rare preference, is always among those sent to the extender.
  - schedulerName: {{ include "escher-extender.allNodesSchedulerName" . }}
    percentageOfNodesToScore: 100
{{- end }}
{{- if eq .Values.mode "extender" }}
extenders:
  # The verbs' own ports: over mutual TLS to the Service, or in the sidecar layout over plain
  # HTTP on the pod's loopback (8889); the policy API is on 8888. Filter and prioritize on
  # 8890 (verbsHTTP1URL), HTTP/1.1: one pod at a time, nothing held open, so HTTP/2 would
  # only cost both processes CPU per call. Bind on 8889, HTTP/2: gang members held at the
  # barrier share one connection.
  - urlPrefix: {{ include "escher-extender.verbsHTTP1URL" . }}
    filterVerb: filter
    preemptVerb: preempt
    {{- if eq .Values.scope "every-pod" }}
    prioritizeVerb: prioritize
    weight: 1  # must be > 0 with a prioritizeVerb; scores 0..10 are multiplied by weight * 10
    {{- end }}
    # Only node names are sent (not a full NodeList per call); the extender watches nodes.
    nodeCacheCapable: true
    # Filter runs in kube-scheduler's scheduling cycle, one pod at a time: an extender that
    # does not answer holds every pod for this long. It answers in milliseconds.
    httpTimeout: 5s
    {{- if not (include "escher-extender.sidecar" .) }}
    {{- include "escher-extender.verbsTLS" . | nindent 4 }}
    {{- end }}
    {{- if eq .Values.scope "split" }}
    # Gang members only, marked scheduling.<domain>/gang by the admission policy
    # <fullname>-marker; the extender advertises the marker on every node.
    managedResources:
      - name: scheduling.{{ .Values.resourceDomain }}/gang
        ignoredByScheduler: true
    {{- end }}
    # Not ignorable: a pod that needs the extender must never be placed without its say.
    ignorable: false
  # The gang barrier (every pod's bind, with scope every-pod). An entry of its own for its
  # timeout: a member's bind waits for the rest of its gang (gangs.waitSeconds, or until the
  # gang's reservation expires), in the binding cycle, beside the scheduling cycle.
  - urlPrefix: {{ include "escher-extender.verbsURL" . }}
    bindVerb: bind
    httpTimeout: {{ add .Values.gangs.waitSeconds 15 }}s
    {{- if not (include "escher-extender.sidecar" .) }}
    {{- include "escher-extender.verbsTLS" . | nindent 4 }}
    {{- end }}
    {{- if eq .Values.scope "split" }}
    managedResources:
      - name: scheduling.{{ .Values.resourceDomain }}/bind
        ignoredByScheduler: true
    {{- end }}
    ignorable: false
  {{- if eq .Values.scope "split" }}
  # Pods with a preference only (scheduling.<domain>/score): their scores, one pod at a time
  # as filter.
  - urlPrefix: {{ include "escher-extender.verbsHTTP1URL" . }}
    prioritizeVerb: prioritize
    weight: 1  # scores 0..10 are multiplied by weight * 10
    nodeCacheCapable: true
    httpTimeout: 5s
    {{- if not (include "escher-extender.sidecar" .) }}
    {{- include "escher-extender.verbsTLS" . | nindent 4 }}
    {{- end }}
    managedResources:
      - name: scheduling.{{ .Values.resourceDomain }}/score
        ignoredByScheduler: true
    ignorable: false
  {{- end }}
{{- end }}
{{- end }}

{{/*
Where kube-scheduler calls the verbs: the Service (mutual TLS), or its own pod's loopback.
*/}}
{{- define "escher-extender.verbsURL" -}}
{{- if include "escher-extender.sidecar" . -}}
http://127.0.0.1:8889
{{- else -}}
https://{{ include "escher-extender.fullname" . }}.{{ .Release.Namespace }}.svc:8889
{{- end }}
{{- end }}

{{/*
Where kube-scheduler calls the verbs it sends one pod at a time (filter, preempt, prioritize):
the Service's HTTP/1.1 listener (mutual TLS, the same certificates as verbsURL's), or in the
sidecar layout the same loopback as verbsURL, which is HTTP/1.1 already. With scope every-pod
verbsURL too: check-scheduler-config tells an entry with no marker (the bind entry) for the
extender's only by the filter entry's urlPrefix, and would refuse a bind entry elsewhere.
*/}}
{{- define "escher-extender.verbsHTTP1URL" -}}
{{- if or (include "escher-extender.sidecar" .) (eq .Values.scope "every-pod") -}}
{{ include "escher-extender.verbsURL" . }}
{{- else -}}
https://{{ include "escher-extender.fullname" . }}.{{ .Release.Namespace }}.svc:8890
{{- end }}
{{- end }}

{{/*
kube-scheduler's side of the verbs' mutual TLS: the extender's CA, its own client certificate.
*/}}
{{- define "escher-extender.verbsTLS" -}}
enableHTTPS: true
tlsConfig:
  # The CA of the extender's serving certificate, which names the Service (the host of
  # urlPrefix), and kube-scheduler's client certificate, which the verbs require.
  caFile: /etc/escher-extender-ca/ca.crt
  certFile: /etc/escher-scheduler-tls/tls.crt
  keyFile: /etc/escher-scheduler-tls/tls.key
{{- end }}
