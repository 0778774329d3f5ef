{{/* The release's base name, at most 63 characters (a DNS label). */}}
{{- define "specdec.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "specdec.drafter.name" -}}{{ include "specdec.fullname" . | trunc 55 | trimSuffix "-" }}-drafter{{- end -}}
{{- define "specdec.gateway.name" -}}{{ include "specdec.fullname" . | trunc 55 | trimSuffix "-" }}-gateway{{- end -}}
{{- define "specdec.verifier.name" -}}{{ include "specdec.fullname" . | trunc 54 | trimSuffix "-" }}-verifier{{- end -}}

{{/* Labels on every object; "component" is drafter, verifier, gateway or test. */}}
{{- define "specdec.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The subset that selects a component's pods (never changes across upgrades). */}}
{{- define "specdec.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "specdec.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- if .image.digest -}}{{ .image.repository }}@{{ .image.digest }}{{- else -}}{{ .image.repository }}:{{ $tag }}{{- end -}}
{{- end -}}

{{/* Where pods mount the TLS secret. */}}
{{- define "specdec.tlsDir" -}}/etc/specdec/tls{{- end -}}

{{/* Where the drafter's bearer token (auth.secretName) is mounted. */}}
{{- define "specdec.authDir" -}}/etc/specdec/auth{{- end -}}

{{/* The name verifier certificates carry: the verifier Service's cluster DNS name. */}}
{{- define "specdec.verifier.serverName" -}}
{{- .Values.tls.verifierServerName | default (printf "%s.%s.svc" (include "specdec.verifier.name" .) .Release.Namespace) -}}
{{- end -}}

{{/* The drafter's --verifier: the verifier Service's EndpointSlices, or its DNS name. */}}
{{- define "specdec.drafter.verifierTarget" -}}
{{- if eq .Values.drafter.verifierDiscovery "kubernetes" -}}
k8s://{{ .Release.Namespace }}/{{ include "specdec.verifier.name" . }}:grpc
{{- else -}}
dns:///{{ include "specdec.verifier.name" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.verifier.port }}
{{- end -}}
{{- end -}}

{{/* Pod termination grace: the preStop pause plus the server's drain grace plus a margin. */}}
{{- define "specdec.terminationGrace" -}}
{{- add (int .preStopSleepSeconds) (int .graceSeconds) 15 -}}
{{- end -}}


{{/* The drafters' ServiceAccount reads EndpointSlices: drafters follow the verifier Service's
(kubernetes discovery), the gateway follows the drafter Service's. */}}
{{- define "specdec.readsEndpointSlices" -}}
{{- if or (eq .Values.drafter.verifierDiscovery "kubernetes") .Values.gateway.enabled -}}true{{- end -}}
{{- end -}}

{{/* The drafter Service's cluster DNS name (what a drafter's certificate names). */}}
{{- define "specdec.drafter.serverName" -}}
{{- printf "%s.%s.svc" (include "specdec.drafter.name" .) .Release.Namespace -}}
{{- end -}}
