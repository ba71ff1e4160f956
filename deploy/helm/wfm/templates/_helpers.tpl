{{/* Name of the chart, overridable. */}}
{{- define "wfm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "wfm.fullname" -}}
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

{{- define "wfm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wfm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "wfm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "wfm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "wfm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "wfm.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret of the values given inline (database URL, admin token, webhook key). */}}
{{- define "wfm.secretName" -}}
{{- include "wfm.fullname" . }}
{{- end }}

{{- define "wfm.databaseSecret" -}}
{{- default (include "wfm.secretName" .) .Values.database.existingSecret }}
{{- end }}
{{- define "wfm.databaseKey" -}}
{{- if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}database-url{{ end }}
{{- end }}

{{- define "wfm.adminTokenSecret" -}}
{{- default (include "wfm.secretName" .) .Values.adminToken.existingSecret }}
{{- end }}
{{- define "wfm.adminTokenKey" -}}
{{- if .Values.adminToken.existingSecret }}{{ .Values.adminToken.existingSecretKey }}{{ else }}admin-token{{ end }}
{{- end }}
{{- define "wfm.hasAdminToken" -}}
{{- if or .Values.adminToken.value .Values.adminToken.existingSecret }}true{{ end }}
{{- end }}

{{- define "wfm.webhookKeySecret" -}}
{{- default (include "wfm.secretName" .) .Values.webhookKey.existingSecret }}
{{- end }}
{{- define "wfm.webhookKeyKey" -}}
{{- if .Values.webhookKey.existingSecret }}{{ .Values.webhookKey.existingSecretKey }}{{ else }}webhook-key{{ end }}
{{- end }}

{{- define "wfm.deviceTLSSecret" -}}
{{- default (printf "%s-device-tls" (include "wfm.fullname" .)) .Values.deviceTLS.existingSecret }}
{{- end }}
{{- define "wfm.clientCASecret" -}}
{{- default (printf "%s-client-ca" (include "wfm.fullname" .)) .Values.deviceTLS.clientCA.existingSecret }}
{{- end }}
{{- define "wfm.clientCAKey" -}}
{{- if .Values.deviceTLS.clientCA.existingSecret }}{{ .Values.deviceTLS.clientCA.existingSecretKey }}{{ else }}ca.crt{{ end }}
{{- end }}
{{- define "wfm.mgmtTLSSecret" -}}
{{- default (printf "%s-mgmt-tls" (include "wfm.fullname" .)) .Values.mgmtTLS.existingSecret }}
{{- end }}

{{/* The probes' scheme: HTTPS when the management listener serves TLS. */}}
{{- define "wfm.mgmtScheme" -}}
{{- if .Values.mgmtTLS.enabled }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
wfm.validate fails the rendering when a value a production server needs is missing: a chart that renders
must start. It is included by the Deployment.
*/}}
{{- define "wfm.validate" -}}
{{- if not (or .Values.database.url .Values.database.existingSecret) }}
{{- fail "database.url or database.existingSecret is required: wfm needs an external PostgreSQL (it starts a private one only outside Kubernetes, for development)" }}
{{- end }}
{{- if not (or .Values.webhookKey.value .Values.webhookKey.existingSecret) }}
{{- fail "webhookKey.value or webhookKey.existingSecret is required: every replica must seal webhook secrets with the same key (openssl rand -base64 32)" }}
{{- end }}
{{- if not (or .Values.deviceTLS.existingSecret (and .Values.deviceTLS.cert .Values.deviceTLS.key)) }}
{{- fail "deviceTLS.existingSecret (kubernetes.io/tls) or deviceTLS.cert and deviceTLS.key are required: the device listener's certificate" }}
{{- end }}
{{- if not (or .Values.deviceTLS.clientCA.existingSecret .Values.deviceTLS.clientCA.bundle) }}
{{- fail "deviceTLS.clientCA.existingSecret or deviceTLS.clientCA.bundle is required: the trust bundle of device client certificates" }}
{{- end }}
{{- if and .Values.mgmtTLS.enabled (not (or .Values.mgmtTLS.existingSecret (and .Values.mgmtTLS.cert .Values.mgmtTLS.key))) }}
{{- fail "mgmtTLS.enabled needs mgmtTLS.existingSecret (kubernetes.io/tls) or mgmtTLS.cert and mgmtTLS.key" }}
{{- end }}
{{- if not (has .Values.config.acceptClients (list "all" "listed")) }}
{{- fail "config.acceptClients must be all or listed" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.minReplicas) 2) }}
{{- fail "autoscaling.minReplicas must be at least 2 (the PodDisruptionBudget keeps one replica serving)" }}
{{- end }}
{{- end }}
