{{/*
The chart's name (nameOverride), truncated for label values.
*/}}
{{- define "escher-extender.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The extender's objects' name: fullnameOverride, else the release name if it contains the
chart's name, else <release>-<name>. `helm install escher-extender` gives deploy/'s names.
*/}}
{{- define "escher-extender.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The scheduler's name: its profile's schedulerName, its Lease and its objects' names. It is
cluster-wide by nature (two schedulers of one name would both place the same pods), so its
cluster-scoped objects may take it as their name.
*/}}
{{- define "escher-extender.schedulerName" -}}
{{- .Values.scheduler.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The profile of the pods the extender decides (scope split): the marker policy moves gang
members and pods with a preference there; it looks at every feasible node.
*/}}
{{- define "escher-extender.allNodesSchedulerName" -}}
{{- printf "%s-all-nodes" (.Values.scheduler.name | trunc 53 | trimSuffix "-") }}
{{- end }}

{{- define "escher-extender.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object of the release carries, besides its name/instance pair.
*/}}
{{- define "escher-extender.commonLabels" -}}
helm.sh/chart: {{ include "escher-extender.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "escher-extender.name" . }}
{{- end }}

{{- define "escher-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "escher-extender.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "escher-extender.labels" -}}
{{ include "escher-extender.selectorLabels" . }}
{{ include "escher-extender.commonLabels" . }}
app.kubernetes.io/component: extender
{{- end }}

{{- define "escher-extender.schedulerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "escher-extender.schedulerName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "escher-extender.schedulerLabels" -}}
{{ include "escher-extender.schedulerSelectorLabels" . }}
{{ include "escher-extender.commonLabels" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{/*
An image reference from {repository, tag, digest}: <repository>:<tag>[@<digest>].
Called with (list <image values> <default tag>).
*/}}
{{- define "escher-extender.imageRef" -}}
{{- $image := index . 0 }}
{{- $tag := default (index . 1) $image.tag }}
{{- if $image.digest }}
{{- printf "%s:%s@%s" $image.repository $tag $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository $tag }}
{{- end }}
{{- end }}

{{/*
A number as a flag or YAML value: integral values without a decimal point or exponent
(values arrive as float64, which would print 1000000 as 1e+06).
*/}}
{{- define "escher-extender.number" -}}
{{- if eq (float64 (int64 .)) (float64 .) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/*
The API budgets: {qps, burst} of one component, its own figures else the shared ones.
Called with (list $ "scheduler"|"extender"); returns JSON.
*/}}
{{- define "escher-extender.kubeAPI" -}}
{{- $values := (index . 0).Values.kubeAPI }}
{{- $own := index $values (index . 1) }}
{{- $qps := ternary $values.qps $own.qps (kindIs "invalid" $own.qps) }}
{{- $burst := ternary $values.burst $own.burst (kindIs "invalid" $own.burst) }}
{{- dict "qps" (include "escher-extender.number" $qps) "burst" (include "escher-extender.number" $burst) | toJson }}
{{- end }}

{{/*
The Secrets' names: the extender's serving pair and CA (tls.crt, tls.key, ca.crt), and
kube-scheduler's client pair with the CA that signed it.
*/}}
{{- define "escher-extender.tlsSecret" -}}
{{- include "escher-extender.fullname" . }}-tls
{{- end }}

{{- define "escher-extender.clientTLSSecret" -}}
{{- include "escher-extender.schedulerName" . }}-client-tls
{{- end }}

{{- define "escher-extender.tokenSecret" -}}
{{- default (printf "%s-token" (include "escher-extender.fullname" .)) .Values.token.existingSecret }}
{{- end }}

{{/*
The DNS names the serving certificate carries: the Service's, which kube-scheduler's
urlPrefix and the ServiceMonitor use, and tls.extraDNSNames.
*/}}
{{- define "escher-extender.dnsNames" -}}
{{- $service := printf "%s.%s.svc" (include "escher-extender.fullname" .) .Release.Namespace }}
{{- concat (list $service (printf "%s.cluster.local" $service)) .Values.tls.extraDNSNames | toJson }}
{{- end }}

{{/*
Does the release need kube-scheduler's client certificate (extender mode's mutual TLS)?
*/}}
{{- define "escher-extender.needsClientTLS" -}}
{{- if and (eq .Values.mode "extender") (not (include "escher-extender.sidecar" .)) }}true{{ end }}
{{- end }}

{{/*
The generated certificates (tls.generate without cert-manager), as JSON:
{ca, cert, key, clientCert, clientKey}. Made once per render and cached on the top-level
context, so that the Secrets and the pods' checksums see the same ones. An existing pair of
Secrets is kept (lookup) when it was generated for the same names, so an upgrade neither
changes the certificates nor restarts the pods; `helm template` (no cluster) always
generates.
*/}}
{{- define "escher-extender.generatedTLS" -}}
{{- if not (hasKey $ "escherGeneratedTLS") }}
{{- $client := include "escher-extender.needsClientTLS" . }}
{{- $names := include "escher-extender.dnsNames" . }}
{{- $for := include "escher-extender.generatedFor" . }}
{{- $tls := dict }}
{{- $serving := lookup "v1" "Secret" .Release.Namespace (include "escher-extender.tlsSecret" .) }}
{{- if eq (dig "metadata" "annotations" "escher.io/generated-for" "" $serving) $for }}
{{- $ca := b64dec (dig "data" "ca.crt" "" $serving) }}
{{- $kept := dict "ca" $ca "cert" (b64dec (dig "data" "tls.crt" "" $serving)) "key" (b64dec (dig "data" "tls.key" "" $serving)) }}
{{- if $client }}
{{- $pair := lookup "v1" "Secret" .Release.Namespace (include "escher-extender.clientTLSSecret" .) }}
{{- if and (eq (dig "metadata" "annotations" "escher.io/generated-for" "" $pair) $for) (eq (b64dec (dig "data" "ca.crt" "" $pair)) $ca) }}
{{- $tls = merge $kept (dict "clientCert" (b64dec (dig "data" "tls.crt" "" $pair)) "clientKey" (b64dec (dig "data" "tls.key" "" $pair))) }}
{{- end }}
{{- else }}
{{- $tls = $kept }}
{{- end }}
{{- end }}
{{- if not $tls }}
{{- $days := int .Values.tls.validityDays }}
{{- $ca := genCA (printf "%s CA" (include "escher-extender.fullname" .)) $days }}
{{- $cert := genSignedCert (include "escher-extender.fullname" .) nil ($names | fromJsonArray) $days $ca }}
{{- $tls = dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key }}
{{- if $client }}
{{- $pair := genSignedCert (include "escher-extender.schedulerName" .) nil nil $days $ca }}
{{- $_ := set $tls "clientCert" $pair.Cert }}
{{- $_ := set $tls "clientKey" $pair.Key }}
{{- end }}
{{- end }}
{{- $_ := set $ "escherGeneratedTLS" $tls }}
{{- end }}
{{- get $ "escherGeneratedTLS" | toJson }}
{{- end }}

{{/*
What generated certificates were made for (the annotation escher.io/generated-for of their
Secrets): a different set of names, or a different scheduler, makes new ones.
*/}}
{{- define "escher-extender.generatedFor" -}}
{{- printf "%s %s" (include "escher-extender.dnsNames" .) (include "escher-extender.schedulerName" .) | sha256sum | trunc 16 }}
{{- end }}

{{/*
The checksum annotation of the pods that mount the certificates: a pod reads them at start,
so new certificates must restart it; kept ones change nothing.
*/}}
{{- define "escher-extender.tlsChecksum" -}}
{{- if and .Values.tls.generate (not .Values.tls.certManager.enabled) -}}
checksum/tls: {{ include "escher-extender.generatedTLS" . | sha256sum }}
{{- end }}
{{- end }}

{{/*
"true" when the extender is a container of the scheduler's pod (layout sidecar, extender
mode), else empty.
*/}}
{{- define "escher-extender.sidecar" -}}
{{- if and (eq .Values.mode "extender") (eq .Values.layout "sidecar") }}true{{ end }}
{{- end }}

{{/*
The ServiceAccount the extender runs as: its own, or in the sidecar layout the scheduler
pod's (a pod has one).
*/}}
{{- define "escher-extender.serviceAccount" -}}
{{- if include "escher-extender.sidecar" . }}
{{- include "escher-extender.schedulerName" . }}
{{- else }}
{{- include "escher-extender.fullname" . }}
{{- end }}
{{- end }}
