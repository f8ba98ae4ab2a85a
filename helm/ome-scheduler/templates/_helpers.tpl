{{/*
Object names. scheduler.name names every object; the selector labels never depend on it.
*/}}
{{- define "ome-scheduler.name" -}}
{{- .Values.scheduler.name -}}
{{- end -}}

{{/* helm.sh/chart: <chart>-<version>, "+" replaced by "_", at most 63 characters. */}}
{{- define "ome-scheduler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: constant, so they match the Deployment, PDB, Service and ServiceMonitor. */}}
{{- define "ome-scheduler.selectorLabels" -}}
app.kubernetes.io/name: ome-scheduler
app.kubernetes.io/component: scheduler
{{- end -}}

{{/* The full label set, stamped on every object and on the pod template. */}}
{{- define "ome-scheduler.labels" -}}
{{ include "ome-scheduler.selectorLabels" . }}
helm.sh/chart: {{ include "ome-scheduler.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ome
{{- end -}}

{{/*
Container image: <hub>/<repository>:<tag> when global.hub is set and the repository has no
"/", otherwise <repository>:<tag>.
*/}}
{{- define "ome-scheduler.image" -}}
{{- $img := .Values.scheduler.image -}}
{{- $repo := toString $img.repository -}}
{{- $hub := toString ((.Values.global).hub | default "") -}}
{{- if and $hub (not (contains "/" $repo)) -}}
{{- printf "%s/%s:%s" $hub $repo (toString $img.tag) -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount subject of every binding the chart owns. */}}
{{- define "ome-scheduler.subject" -}}
- kind: ServiceAccount
  name: {{ include "ome-scheduler.name" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
