{{/*
Names, labels, and the paths the gateway reads inside the pod. The mount paths are defined
here once; the Deployment mounts volumes at them and the config file names files under them.
*/}}

{{- define "apigw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "apigw.fullname" -}}
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

{{- define "apigw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "apigw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "apigw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "apigw.labels" -}}
helm.sh/chart: {{ include "apigw.chart" . }}
{{ include "apigw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "apigw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "apigw.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "apigw.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* True ("true") when the gateway watches the cluster instead of a manifest directory. */}}
{{/* The authorizers in order: authorization.modes, or by default the cluster's
SubjectAccessReview API in cluster mode (decisions as kube-apiserver's) and AlwaysAllow
otherwise (the backends decide). */}}
{{- define "apigw.authorizationModes" -}}
{{- $modes := .Values.authorization.modes }}
{{- if not $modes }}
{{- $modes = ternary (list "Webhook") (list "AlwaysAllow") (eq (include "apigw.clusterMode" .) "true") }}
{{- end }}
{{- toJson $modes }}
{{- end }}

{{- define "apigw.clusterMode" -}}
{{- if eq .Values.apiservices.source "cluster" }}true{{ end }}
{{- end }}

{{/* The Service's in-cluster DNS name, which the serving certificate always covers. */}}
{{- define "apigw.serviceHost" -}}
{{- printf "%s.%s.svc" (include "apigw.fullname" .) .Release.Namespace }}
{{- end }}

{{/* DNS names of the serving certificate (a list, as JSON). */}}
{{- define "apigw.servingDnsNames" -}}
{{- $fullname := include "apigw.fullname" . }}
{{- $names := list $fullname (printf "%s.%s" $fullname .Release.Namespace) (include "apigw.serviceHost" .) (printf "%s.cluster.local" (include "apigw.serviceHost" .)) }}
{{- if .Values.ingress.enabled }}
{{- $names = append $names .Values.ingress.host }}
{{- end }}
{{- $names = concat $names .Values.certificates.serving.dnsNames }}
{{- $names | uniq | toJson }}
{{- end }}

{{/* Paths inside the pod. */}}
{{- define "apigw.path.configDir" -}}/etc/apigw/config{{- end }}
{{- define "apigw.path.config" -}}{{ include "apigw.path.configDir" . }}/config.yaml{{- end }}
{{- define "apigw.path.policy" -}}{{ include "apigw.path.configDir" . }}/authorization-policy.yaml{{- end }}
{{- define "apigw.path.authenticationConfig" -}}{{ include "apigw.path.configDir" . }}/authentication-config.yaml{{- end }}
{{- define "apigw.path.apiservices" -}}/etc/apigw/apiservices{{- end }}
{{- define "apigw.path.serving" -}}/etc/apigw/tls/serving{{- end }}
{{- define "apigw.path.proxyClient" -}}/etc/apigw/tls/proxy-client{{- end }}
{{- define "apigw.path.clientCa" -}}/etc/apigw/tls/client-ca{{- end }}
{{- define "apigw.path.requestHeaderCa" -}}/etc/apigw/tls/requestheader-ca{{- end }}
{{- define "apigw.path.serviceCa" -}}/etc/apigw/tls/service-ca{{- end }}
{{- define "apigw.path.delegateCa" -}}/etc/apigw/tls/delegate-ca{{- end }}
{{- define "apigw.path.delegateToken" -}}/var/run/secrets/apigw/delegate{{- end }}
{{- /* "true" when the gateway reaches the delegate by impersonation with its own token. */}}
{{- define "apigw.delegateImpersonation" -}}
{{- with .Values.gateway.delegate }}{{ if and .enabled (eq .auth "impersonation") }}true{{ end }}{{ end }}
{{- end }}
{{- define "apigw.path.tokens" -}}/etc/apigw/tokens{{- end }}

{{/* Secret names of the three certificates, per mode. */}}
{{- define "apigw.servingSecret" -}}
{{- if eq .Values.certificates.mode "existing" }}
{{- required "certificates.existing.servingSecret is required with certificates.mode=existing" .Values.certificates.existing.servingSecret }}
{{- else }}
{{- printf "%s-serving-cert" (include "apigw.fullname" .) }}
{{- end }}
{{- end }}

{{- define "apigw.proxyClientSecret" -}}
{{- if eq .Values.certificates.mode "existing" }}
{{- required "certificates.existing.proxyClientSecret is required with certificates.mode=existing and certificates.proxyClient.enabled" .Values.certificates.existing.proxyClientSecret }}
{{- else }}
{{- printf "%s-proxy-client-cert" (include "apigw.fullname" .) }}
{{- end }}
{{- end }}

{{- define "apigw.clientCaSecret" -}}
{{- printf "%s-client-ca" (include "apigw.fullname" .) }}
{{- end }}

{{/* The generated or chart-owned token file: user items plus the scrape token. */}}
{{- define "apigw.tokensSecret" -}}
{{- if .Values.authentication.tokens.existingSecret }}
{{- .Values.authentication.tokens.existingSecret }}
{{- else }}
{{- printf "%s-tokens" (include "apigw.fullname" .) }}
{{- end }}
{{- end }}

{{- define "apigw.tokensKey" -}}
{{- if .Values.authentication.tokens.existingSecret }}
{{- .Values.authentication.tokens.existingSecretKey }}
{{- else }}tokens.csv{{- end }}
{{- end }}

{{/* "true" when the chart makes a scrape token for the ServiceMonitor. */}}
{{- define "apigw.scrapeToken" -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.port) (not .Values.serviceMonitor.bearerTokenSecret.name) }}true{{ end }}
{{- end }}

{{- define "apigw.scrapeTokenSecret" -}}
{{- if .Values.serviceMonitor.bearerTokenSecret.name }}
{{- .Values.serviceMonitor.bearerTokenSecret.name }}
{{- else }}
{{- printf "%s-metrics-token" (include "apigw.fullname" .) }}
{{- end }}
{{- end }}

{{/* "true" when the gateway gets a token file. */}}
{{- define "apigw.tokens" -}}
{{- if or .Values.authentication.tokens.items .Values.authentication.tokens.existingSecret (include "apigw.scrapeToken" .) }}true{{ end }}
{{- end }}

{{/* The plain-HTTP metrics address, IPv6-aware. */}}
{{- define "apigw.metricsBindAddress" -}}
{{- if contains ":" .Values.gateway.bindAddress }}
{{- printf "[%s]:%d" .Values.gateway.bindAddress (int .Values.metrics.port) }}
{{- else }}
{{- printf "%s:%d" .Values.gateway.bindAddress (int .Values.metrics.port) }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds consistent with the gateway's shutdown settings. */}}
{{- define "apigw.terminationGracePeriodSeconds" -}}
{{- with .Values.shutdown }}
{{- add (int .preStopSleepSeconds) (int .delaySeconds) (int .gracePeriodSeconds) (int .extraSeconds) }}
{{- end }}
{{- end }}
