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
SECRET_KEY SWITCHYARD_KEY_PEPPER SWITCHYARD_AUDIT_SIGNING_KEY DATABASE_URL REDIS_URL SWITCHYARD_GATEWAY_REDIS_URL SWITCHYARD_AUDIT_WITNESS_URL SWITCHYARD_METRICS_TOKEN EMAIL_HOST_PASSWORD
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
{{- range (list "SWITCHYARD_OIDC_PROVIDERS" "SWITCHYARD_LOCAL_SIGNIN" "EMAIL_BACKEND" "EMAIL_HOST" "EMAIL_PORT" "EMAIL_HOST_USER" "EMAIL_USE_TLS" "DEFAULT_FROM_EMAIL") }}
{{- if hasKey $.Values.config . }}
{{- fail (printf "config.%s comes from the sso / email values (secrets by Secret reference, never inline): set it there" .) }}
{{- end }}
{{- end }}
{{- $data := dict -}}
{{- range $name, $value := .Values.config }}{{ $_ := set $data $name (toString $value) }}{{ end -}}
{{- range $name, $value := (include "switchyard.identityConfig" . | fromYaml) }}{{ $_ := set $data $name $value }}{{ end -}}
{{- $_ := set $data "ALLOWED_HOSTS" ($hosts | uniq | join ",") -}}
{{- $_ := set $data "SWITCHYARD_RUNTIME_BACKENDS" (include "switchyard.runtimeBackends" . ) -}}
{{- toYaml $data -}}
{{- end -}}

{{/* Where the identity secrets (OIDC client secrets, SCIM tokens, the SMTP password) are mounted. */}}
{{- define "switchyard.identityDir" -}}/run/secrets/switchyard-identity{{- end -}}

{{/* The identity secrets as (dict "secretName" "key" "path"), from the sso and email values. */}}
{{- define "switchyard.identitySecrets" -}}
{{- $files := list -}}
{{- range $provider := .Values.sso.providers }}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]{0,62}$" (.name | default "")) }}
{{- fail (printf "sso.providers: name %q must be a slug (lowercase letters, digits, hyphens)" (.name | default "")) }}
{{- end }}
{{- if or (not .issuer) (not .clientId) (not .clientSecret) }}
{{- fail (printf "sso.providers[%s] needs issuer, clientId and clientSecret ({secretName, key} of a Secret)" .name) }}
{{- end }}
{{- if kindIs "string" .clientSecret }}
{{- fail (printf "sso.providers[%s].clientSecret must name a Secret ({secretName, key}), never hold the secret" .name) }}
{{- end }}
{{- if or (not .clientSecret.secretName) (not .clientSecret.key) }}
{{- fail (printf "sso.providers[%s].clientSecret needs secretName and key" .name) }}
{{- end }}
{{- $files = append $files (dict "secretName" .clientSecret.secretName "key" .clientSecret.key "path" (printf "oidc-%s-client-secret" .name)) }}
{{- with .scimToken }}
{{- if or (kindIs "string" .) (not .secretName) (not .key) }}
{{- fail (printf "sso.providers[%s].scimToken must name a Secret ({secretName, key}), never hold the token" $provider.name) }}
{{- end }}
{{- $files = append $files (dict "secretName" .secretName "key" .key "path" (printf "oidc-%s-scim-token" $provider.name)) }}
{{- end }}
{{- end }}
{{- with .Values.email.password }}
{{- if kindIs "string" . }}
{{- if . }}{{ fail "email.password must name a Secret ({secretName, key}), never hold the password" }}{{ end }}
{{- else if and .secretName .key }}
{{- $files = append $files (dict "secretName" .secretName "key" .key "path" "EMAIL_HOST_PASSWORD") }}
{{- end }}
{{- end }}
{{- toJson $files -}}
{{- end -}}

{{/* ConfigMap entries from the sso and email values: no secret in them, only the files' paths. */}}
{{- define "switchyard.identityConfig" -}}
{{- $dir := include "switchyard.identityDir" . -}}
{{- $providers := dict -}}
{{- range .Values.sso.providers }}
{{- $p := dict "label" (.label | default .name) "issuer" .issuer "client_id" .clientId
      "client_secret_file" (printf "%s/oidc-%s-client-secret" $dir .name) -}}
{{- if .scimToken }}{{ $_ := set $p "scim_token_file" (printf "%s/oidc-%s-scim-token" $dir .name) }}{{ end -}}
{{- if .scopes }}{{ $_ := set $p "scopes" .scopes }}{{ end -}}
{{- if .groupsClaim }}{{ $_ := set $p "groups_claim" .groupsClaim }}{{ end -}}
{{- if .groupPrefix }}{{ $_ := set $p "group_prefix" .groupPrefix }}{{ end -}}
{{- $_ := set $providers .name $p -}}
{{- end -}}
{{- $backends := dict "console" "django.core.mail.backends.console.EmailBackend" "smtp" "django.core.mail.backends.smtp.EmailBackend" -}}
{{- if not (hasKey $backends .Values.email.backend) }}
{{- fail (printf "email.backend must be console or smtp, not %q" .Values.email.backend) }}
{{- end }}
{{- $data := dict "SWITCHYARD_OIDC_PROVIDERS" (toJson $providers) "SWITCHYARD_LOCAL_SIGNIN" (ternary "true" "false" (ne (toString .Values.sso.localSignin) "false"))
      "EMAIL_BACKEND" (get $backends .Values.email.backend) "DEFAULT_FROM_EMAIL" (toString .Values.email.from) -}}
{{- if eq .Values.email.backend "smtp" }}
{{- if not .Values.email.host }}{{ fail "email.backend smtp needs email.host" }}{{ end }}
{{- $_ := set $data "EMAIL_HOST" (toString .Values.email.host) }}
{{- $_ := set $data "EMAIL_PORT" (toString .Values.email.port) }}
{{- $_ := set $data "EMAIL_HOST_USER" (toString .Values.email.username) }}
{{- $_ := set $data "EMAIL_USE_TLS" (ternary "true" "false" (ne (toString .Values.email.useTls) "false")) }}
{{- end }}
{{- $url := .Values.sso.consoleUrl -}}
{{- if and (not $url) .Values.ingress.enabled .Values.ingress.hosts }}{{ $url = printf "https://%s" (first .Values.ingress.hosts) }}{{ end -}}
{{- if and $url (not (hasKey .Values.config "SWITCHYARD_CONSOLE_URL")) }}{{ $_ := set $data "SWITCHYARD_CONSOLE_URL" (toString $url) }}{{ end -}}
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
{{- include "switchyard.identityEnv" . }}
{{- end -}}

{{/* EMAIL_HOST_PASSWORD_FILE when the SMTP password comes from a Secret (the OIDC files are named in
SWITCHYARD_OIDC_PROVIDERS itself). */}}
{{- define "switchyard.identityEnv" -}}
{{- range (include "switchyard.identitySecrets" . | fromJsonArray) }}
{{- if eq .path "EMAIL_HOST_PASSWORD" }}
  - name: EMAIL_HOST_PASSWORD_FILE
    value: {{ include "switchyard.identityDir" $ }}/EMAIL_HOST_PASSWORD
{{- end }}
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
{{- include "switchyard.identityEnv" . }}
{{- end -}}

{{- define "switchyard.volumeMounts" -}}
- name: var
  mountPath: /var/lib/switchyard
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: /run/secrets/switchyard
  readOnly: true
{{- if (include "switchyard.identitySecrets" . | fromJsonArray) }}
- name: identity-secrets
  mountPath: {{ include "switchyard.identityDir" . }}
  readOnly: true
{{- end }}
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
{{- with (include "switchyard.identitySecrets" . | fromJsonArray) }}
{{- /* Secrets the operator made (one per IdP, the SMTP one), each key projected to the file its setting names. */}}
- name: identity-secrets
  projected:
    defaultMode: 0440
    sources:
{{- range . }}
      - secret:
          name: {{ .secretName }}
          items:
            - key: {{ .key }}
              path: {{ .path }}
{{- end }}
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
