{{/* Names */}}
{{- define "switchyard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "switchyard.fullname" .) -}}
{{- end -}}

{{- define "switchyard.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.enginePrefix" -}}
{{- .Values.engines.kubernetes.namespacePrefix | default .Release.Name -}}
{{- end -}}

{{/* Labels. The component label is what the engines' NetworkPolicy selects the gateway by. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* (dict "root" $ "component" "gateway") */}}
{{- define "switchyard.componentSelector" -}}
{{ include "switchyard.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "switchyard.componentLabels" -}}
{{ include "switchyard.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Settings that are secrets: never in the ConfigMap, always files from the Secret. */}}
{{- define "switchyard.secretSettingNames" -}}
SECRET_KEY SWITCHYARD_KEY_PEPPER SWITCHYARD_AUDIT_SIGNING_KEY DATABASE_URL REDIS_URL SWITCHYARD_GATEWAY_REDIS_URL SWITCHYARD_AUDIT_WITNESS_URL SWITCHYARD_METRICS_TOKEN
{{- end -}}

{{/* The keys of the Secret the processes read (NAME_FILE each). */}}
{{- define "switchyard.secretKeys" -}}
{{- $keys := list "SECRET_KEY" "SWITCHYARD_KEY_PEPPER" "SWITCHYARD_AUDIT_SIGNING_KEY" "DATABASE_URL" "REDIS_URL" -}}
{{- range $name, $_ := .Values.secrets.extra }}{{ $keys = append $keys $name }}{{ end -}}
{{- $keys | uniq | join " " -}}
{{- end -}}

{{/* The ConfigMap's data: the `config` values plus what the chart derives. */}}
{{- define "switchyard.configData" -}}
{{- $secretNames := splitList " " (include "switchyard.secretSettingNames" .) -}}
{{- range $name, $_ := .Values.config }}
{{- if or (has $name $secretNames) (hasSuffix "_FILE" $name) }}
{{- fail (printf "config.%s is a secret setting: put it in secrets (secrets.extra or existingSecret), never in the ConfigMap" $name) }}
{{- end }}
{{- end }}
{{- $fullname := include "switchyard.fullname" . -}}
{{- $hosts := list "localhost" (printf "%s-console" $fullname) (printf "%s-console.%s.svc" $fullname .Release.Namespace) -}}
{{- range (splitList "," (.Values.config.ALLOWED_HOSTS | default "")) }}{{ if trim . }}{{ $hosts = append $hosts (trim .) }}{{ end }}{{ end -}}
{{- if .Values.ingress.enabled }}{{ range .Values.ingress.hosts }}{{ $hosts = append $hosts . }}{{ end }}{{ end -}}
{{- $data := dict -}}
{{- range $name, $value := .Values.config }}{{ $_ := set $data $name (toString $value) }}{{ end -}}
{{- $_ := set $data "ALLOWED_HOSTS" ($hosts | uniq | join ",") -}}
{{- $_ := set $data "SWITCHYARD_RUNTIME_BACKENDS" (include "switchyard.runtimeBackends" . ) -}}
{{- toYaml $data -}}
{{- end -}}

{{/* SWITCHYARD_RUNTIME_BACKENDS (JSON): the kubernetes backend with the options this release knows. */}}
{{- define "switchyard.runtimeBackends" -}}
{{- $backends := dict -}}
{{- if not .Values.engines.keepHostBackends -}}
{{- $_ := set $backends "local" nil -}}
{{- $_ := set $backends "simulator" nil -}}
{{- end -}}
{{- with .Values.engines.kubernetes -}}
{{- if .enabled -}}
{{- $clients := list (include "switchyard.componentSelector" (dict "root" $ "component" "gateway") | fromYaml)
      (include "switchyard.componentSelector" (dict "root" $ "component" "worker") | fromYaml) -}}
{{- $options := dict "in_cluster" true
      "namespace_prefix" (include "switchyard.enginePrefix" $)
      "control_namespace" $.Release.Namespace
      "client_labels" $clients -}}
{{- if .weightsPvc -}}
{{- $_ := set $options "weights_pvc" .weightsPvc -}}
{{- else -}}
{{- $_ := set $options "fetch_image" (include "switchyard.image" $) -}}
{{- end -}}
{{- $_ := set $backends .name (dict "class" .class "label" .label "options" (mergeOverwrite $options (deepCopy .options))) -}}
{{- end -}}
{{- end -}}
{{- toJson $backends -}}
{{- end -}}

{{/* Environment every Switchyard container gets: the ConfigMap, and each secret as a file. */}}
{{- define "switchyard.env" -}}
envFrom:
  - configMapRef:
      name: {{ include "switchyard.fullname" . }}
env:
{{- range (splitList " " (include "switchyard.secretKeys" .)) }}
  - name: {{ . }}_FILE
    value: /run/secrets/switchyard/{{ . }}
{{- end }}
{{- end -}}

{{/* The migrate job runs before the ConfigMap exists on a first install: the same data, inline. */}}
{{- define "switchyard.inlineEnv" -}}
env:
{{- range $name, $value := (include "switchyard.configData" . | fromYaml) }}
  - name: {{ $name }}
    value: {{ $value | quote }}
{{- end }}
{{- range (splitList " " (include "switchyard.secretKeys" .)) }}
  - name: {{ . }}_FILE
    value: /run/secrets/switchyard/{{ . }}
{{- end }}
{{- end -}}

{{- define "switchyard.volumeMounts" -}}
- name: var
  mountPath: /var/lib/switchyard
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: /run/secrets/switchyard
  readOnly: true
{{- end -}}

{{- define "switchyard.volumes" -}}
- name: var
  emptyDir:
    sizeLimit: {{ .Values.varVolume.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpVolume.sizeLimit }}
- name: secrets
  secret:
    secretName: {{ include "switchyard.secretName" . }}
    defaultMode: 0440
    items:
{{- range (splitList " " (include "switchyard.secretKeys" .)) }}
      - key: {{ . }}
        path: {{ . }}
{{- end }}
{{- end -}}

{{/* Holds a pod until `manage.py migrate --check` passes: no process runs against an older schema. */}}
{{- define "switchyard.waitForMigrations" -}}
- name: wait-for-migrations
  image: {{ include "switchyard.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["wait-for-migrations"]
  {{- include "switchyard.env" . | nindent 2 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.waitForMigrations.resources | nindent 4 }}
  volumeMounts:
    {{- include "switchyard.volumeMounts" . | nindent 4 }}
{{- end -}}

{{/* Pod-level fields shared by every Switchyard pod. (dict "root" $ "serviceAccount" name "automount" bool) */}}
{{- define "switchyard.podCommon" -}}
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: {{ .automount }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Restart pods when their settings change. */}}
{{- define "switchyard.checksums" -}}
checksum/config: {{ include "switchyard.configData" . | sha256sum }}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ list .Values.secrets .Values.database .Values.redis | toJson | sha256sum }}
{{- end }}
{{- end -}}

{{- define "switchyard.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
