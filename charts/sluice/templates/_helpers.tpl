{{/* Names, labels and the pieces every Deployment shares. */}}

{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: dict "root" $ "component" "admission". */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The enabled kinds, in the order of the kinds table (_kinds.tpl): those
whose entry under integrations says enabled, and those enabled by default
(the table's "enabled") whose entry does not say otherwise; a name under
integrations: that is not a kind fails the render.
*/}}
{{- define "sluice.enabledKinds" -}}
{{- $kinds := include "sluice.kinds" . | fromYaml -}}
{{- range $name, $_ := .Values.integrations -}}
{{- if not (hasKey $kinds $name) -}}
{{- fail (printf "integrations.%s: not a kind Sluice integrates (known: %s)" $name (keys $kinds | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $line := include "sluice.kinds" . | splitList "\n" -}}
{{- $name := regexFind "^[a-z0-9]+" $line -}}
{{- if $name -}}
{{- $v := index $.Values.integrations $name | default dict -}}
{{- if hasKey $v "enabled" | ternary $v.enabled (index $kinds $name).enabled -}}
{{- $out = append $out $name -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* What a parent kind's objects create is queued by another kind's integration. */ -}}
{{- range $name := $out -}}
{{- $by := (index $kinds $name).queuedBy -}}
{{- if and $by (not (has $by $out)) -}}
{{- $out = append $out $by -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The enabled kinds whose objects are queued themselves: all but the parent
kinds (Deployment, StatefulSet), whose Pods are. JSON list.
*/}}
{{- define "sluice.queuedKinds" -}}
{{- $kinds := include "sluice.kinds" . | fromYaml -}}
{{- $out := list -}}
{{- range $name := include "sluice.enabledKinds" . | fromJsonArray -}}
{{- if not (index $kinds $name).queuedBy -}}
{{- $out = append $out $name -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
The settings of one kind's integration: its entry under integrations over
integrationDefaults. dict "root" $ "kind" "job".
*/}}
{{- define "sluice.integrationValues" -}}
{{- $out := deepCopy .root.Values.integrationDefaults -}}
{{- range $k, $v := index .root.Values.integrations .kind | default dict -}}
{{- /* A map merges into the default's; any other value replaces it, zero
values included (replicas: 0), which mergeOverwrite would skip. */ -}}
{{- if and (kindIs "map" $v) (kindIs "map" (index $out $k)) -}}
{{- $_ := set $out $k (mergeOverwrite (deepCopy (index $out $k)) (deepCopy $v)) -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The webhook Service of a kind: dict "root" $ "kind" "job". */}}
{{- define "sluice.webhookService" -}}
{{- printf "%s-%s-webhook" (include "sluice.fullname" .root) .kind | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.webhookCertSecret" -}}
{{- printf "%s-webhook-cert" (include "sluice.fullname" .) -}}
{{- end -}}

{{/* The bundled NATS server's StatefulSet, Service and Secrets' prefix. */}}
{{- define "sluice.natsName" -}}
{{- printf "%s-nats" (include "sluice.fullname" .) | trunc 58 | trimSuffix "-" -}}
{{- end -}}

{{/* The URL the services connect to: the bundled server's, or nats.url. */}}
{{- define "sluice.natsURL" -}}
{{- $v := .Values.nats -}}
{{- if $v.install.enabled -}}
{{- printf "%s://%s.%s.svc:4222" (ternary "tls" "nats" $v.install.tls.enabled) (include "sluice.natsName" .) .Release.Namespace -}}
{{- else -}}
{{- required "nats.url: the URL of your NATS server (or nats.install.enabled=true for one inside the release)" $v.url -}}
{{- end -}}
{{- end -}}

{{/* The Secret of the users' passwords, seeds or credentials. */}}
{{- define "sluice.natsUsersSecret" -}}
{{- $v := .Values.nats -}}
{{- if $v.auth.secretName -}}
{{- $v.auth.secretName -}}
{{- else if $v.install.enabled -}}
{{- printf "%s-users" (include "sluice.natsName" .) -}}
{{- end -}}
{{- end -}}

{{/* The Secret whose ca.crt verifies the server ("" for none). */}}
{{- define "sluice.natsCASecret" -}}
{{- $v := .Values.nats -}}
{{- if $v.tls.caSecret -}}
{{- $v.tls.caSecret -}}
{{- else if and $v.install.enabled $v.install.tls.enabled -}}
{{- printf "%s-tls" (include "sluice.natsName" .) -}}
{{- end -}}
{{- end -}}

{{/*
A service's NATS user: dict "root" $ "user" "admission". The bundled
server's users are Sluice's own names (`sluice nats-authorization`); a
server of your own may name them otherwise (nats.auth.users).
*/}}
{{- define "sluice.natsUser" -}}
{{- if .root.Values.nats.install.enabled -}}
{{- .user -}}
{{- else -}}
{{- index .root.Values.nats.auth.users .user -}}
{{- end -}}
{{- end -}}

{{/*
Arguments and environment every service shares, for NATS: dict "root" $
"user" "admission". The password is only ever in the environment.
*/}}
{{- define "sluice.natsArgs" -}}
{{- $v := .root.Values.nats -}}
{{- $user := include "sluice.natsUser" . -}}
- --nats={{ include "sluice.natsURL" .root }}
- --replicas={{ $v.replicas }}
- --startup-wait={{ .root.Values.startupWait }}
{{- if eq $v.auth.mode "password" }}
- --nats-user={{ $user }}
{{- else if eq $v.auth.mode "creds" }}
- --nats-creds=/etc/sluice/nats-auth/{{ $user }}.creds
{{- else if eq $v.auth.mode "nkey" }}
- --nats-nkey=/etc/sluice/nats-auth/{{ $user }}.nk
{{- end }}
{{- if include "sluice.natsCASecret" .root }}
- --nats-ca=/etc/sluice/nats-ca/ca.crt
{{- end }}
{{- if $v.tls.clientSecret }}
- --nats-cert=/etc/sluice/nats-client/tls.crt
- --nats-key=/etc/sluice/nats-client/tls.key
{{- end }}
{{- end -}}

{{- define "sluice.natsEnv" -}}
{{- $v := .root.Values.nats -}}
{{- if eq $v.auth.mode "password" }}
- name: SLUICE_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "sluice.natsUsersSecret" .root }}
      key: {{ include "sluice.natsUser" . }}
{{- end }}
{{- end -}}

{{- define "sluice.natsVolumeMounts" -}}
{{- $v := .root.Values.nats -}}
{{- if or (eq $v.auth.mode "creds") (eq $v.auth.mode "nkey") }}
- {name: nats-auth, mountPath: /etc/sluice/nats-auth, readOnly: true}
{{- end }}
{{- if include "sluice.natsCASecret" .root }}
- {name: nats-ca, mountPath: /etc/sluice/nats-ca, readOnly: true}
{{- end }}
{{- if $v.tls.clientSecret }}
- {name: nats-client, mountPath: /etc/sluice/nats-client, readOnly: true}
{{- end }}
{{- end -}}

{{/* Only the user's own file of the shared Secret is mounted. */}}
{{- define "sluice.natsVolumes" -}}
{{- $v := .root.Values.nats -}}
{{- $user := include "sluice.natsUser" . -}}
{{- if or (eq $v.auth.mode "creds") (eq $v.auth.mode "nkey") }}
{{- $file := printf "%s.%s" $user (ternary "creds" "nk" (eq $v.auth.mode "creds")) }}
- name: nats-auth
  secret:
    secretName: {{ include "sluice.natsUsersSecret" .root }}
    items: [{key: {{ $file }}, path: {{ $file }}}]
{{- end }}
{{- with include "sluice.natsCASecret" .root }}
- name: nats-ca
  secret:
    secretName: {{ . }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- if $v.tls.clientSecret }}
- name: nats-client
  secret:
    secretName: {{ $v.tls.clientSecret }}
{{- end }}
{{- end -}}

{{/*
Scheduling of a pod: its own nodeSelector, tolerations and affinity, each
the release-wide one when empty: dict "root" $ "values" .Values.admission.
*/}}
{{- define "sluice.scheduling" -}}
{{- $root := .root -}}
{{- with .values.nodeSelector | default $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations | default $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity | default $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
One service's Deployment (and its PodDisruptionBudget when it has more than
one replica): dict "root" $ "component" "admission" "user" "admission"
"values" .Values.admission "args" (list …) "serviceAccount" true|false
"webhookCerts" true|false "visibility" true|false (the pending API's TLS
port and certificate).
*/}}
{{- /*
sluice.configuration is the Configuration document admission and the
integrations read with --config; empty when nothing in it is set.
*/ -}}
{{- define "sluice.configuration" -}}
{{- $strategies := .Values.admission.fairSharingPreemptionStrategies -}}
{{- if or .Values.waitForPodsReady $strategies .Values.quotaResources .Values.manageJobsWithoutQueueName .Values.managedJobsNamespaceSelector .Values.admissionFairSharing -}}
apiVersion: sluice.dev/v1beta1
kind: Configuration
{{- if .Values.manageJobsWithoutQueueName }}
manageJobsWithoutQueueName: true
{{- end }}
{{- if or .Values.manageJobsWithoutQueueName .Values.managedJobsNamespaceSelector }}
managedJobsNamespaceSelector:
  {{- include "sluice.managedNamespaces" . | nindent 2 }}
{{- end }}
{{- with $strategies }}
fairSharing:
  enable: {{ $.Values.admission.fairSharing }}
  preemptionStrategies: {{ toJson . }}
{{- end }}
{{- with .Values.waitForPodsReady }}
waitForPodsReady:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.admissionFairSharing }}
admissionFairSharing:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.quotaResources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "sluice.deployment" -}}
{{- $root := .root -}}
{{- $name := printf "%s-%s" (include "sluice.fullname" $root) .component -}}
{{- $sel := include "sluice.selectorLabels" (dict "root" $root "component" .component) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "sluice.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  replicas: {{ .values.replicas }}
  selector:
    matchLabels:
      {{- $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $sel | nindent 8 }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- if and .webhookCerts (not $root.Values.webhook.certManager.enabled) }}
        {{- /* the certificate Secret's content: a new one restarts the pods */}}
        checksum/webhook-cert: {{ include "sluice.webhookCertificate" $root | sha256sum }}
        {{- end }}
        {{- if .config }}
        checksum/config: {{ include "sluice.configuration" $root | sha256sum }}
        {{- end }}
        {{- if and .visibility (not $root.Values.webhook.certManager.enabled) }}
        checksum/visibility-cert: {{ include "sluice.visibilityCertificate" $root | sha256sum }}
        {{- end }}
        {{- if $root.Values.prometheusAnnotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ $root.Values.httpPort | quote }}
        prometheus.io/path: /metrics
        {{- end }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ $name }}
      {{- /* only the services that talk to the API server get a token */}}
      automountServiceAccountToken: {{ .serviceAccount }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: 30
      containers:
        - name: {{ .component }}
          image: {{ include "sluice.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            - --http-address=:{{ $root.Values.httpPort }}
            - --metrics-names={{ $root.Values.metricsNames }}
            - --log-level={{ $root.Values.logLevel }}
            - --setup=false
            {{- if .config }}
            - --config=/etc/sluice/config/config.yaml
            {{- end }}
            {{- include "sluice.natsArgs" (dict "root" $root "user" .user) | nindent 12 }}
            {{- range .values.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef: {fieldPath: metadata.name}
            {{- with $root.Values.goMemLimit }}
            - {name: GOMEMLIMIT, value: {{ . | quote }}}
            {{- end }}
            {{- with include "sluice.natsEnv" (dict "root" $root "user" .user) }}{{ . | nindent 12 }}{{ end }}
            {{- with $root.Values.tracing }}
            {{- if .endpoint }}
            - {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ .endpoint | quote }}}
            - {name: OTEL_EXPORTER_OTLP_PROTOCOL, value: {{ .protocol | quote }}}
            - {name: OTEL_TRACES_SAMPLER, value: {{ .sampler | quote }}}
            {{- if .samplerArg }}
            - {name: OTEL_TRACES_SAMPLER_ARG, value: {{ .samplerArg | quote }}}
            {{- end }}
            {{- end }}
            {{- end }}
          ports:
            - {name: http, containerPort: {{ $root.Values.httpPort }}, protocol: TCP}
            {{- if .webhookCerts }}
            - {name: webhook, containerPort: {{ $root.Values.webhook.port }}, protocol: TCP}
            {{- end }}
            {{- if .visibility }}
            - {name: visibility, containerPort: {{ $root.Values.admission.visibility.port }}, protocol: TCP}
            {{- end }}
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: 5
            failureThreshold: 2
          # Up to --startup-wait, and a minute to sync, before liveness.
          startupProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 2
            failureThreshold: {{ include "sluice.startupProbeFailures" $root }}
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- if .webhookCerts }}
            - {name: webhook-cert, mountPath: /etc/sluice/webhook, readOnly: true}
            {{- end }}
            {{- if .visibility }}
            - {name: visibility-cert, mountPath: /etc/sluice/visibility, readOnly: true}
            {{- end }}
            {{- if .config }}
            - {name: config, mountPath: /etc/sluice/config, readOnly: true}
            {{- end }}
            {{- with include "sluice.natsVolumeMounts" (dict "root" $root) }}{{ . | nindent 12 }}{{ end }}
      volumes:
        {{- if .webhookCerts }}
        - name: webhook-cert
          secret:
            secretName: {{ include "sluice.webhookCertSecret" $root }}
        {{- end }}
        {{- if .visibility }}
        - name: visibility-cert
          secret:
            secretName: {{ include "sluice.fullname" $root }}-visibility-cert
        {{- end }}
        {{- if .config }}
        - name: config
          configMap:
            name: {{ include "sluice.fullname" $root }}-config
        {{- end }}
        {{- with include "sluice.natsVolumes" (dict "root" $root "user" .user) }}{{ . | nindent 8 }}{{ end }}
      {{- include "sluice.scheduling" (dict "root" $root "values" .values) | nindent 6 }}
{{- if gt (int .values.replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "sluice.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      {{- $sel | nindent 6 }}
{{- end }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "sluice.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
automountServiceAccountToken: false
{{- end -}}

{{/* The DNS names of the webhook Services, comma-separated. */}}
{{- define "sluice.webhookHosts" -}}
{{- $hosts := list -}}
{{- range $kind := include "sluice.enabledKinds" . | fromJsonArray -}}
{{- $svc := include "sluice.webhookService" (dict "root" $ "kind" $kind) -}}
{{- $hosts = append $hosts (printf "%s.%s.svc" $svc $.Release.Namespace) -}}
{{- $hosts = append $hosts (printf "%s.%s.svc.cluster.local" $svc $.Release.Namespace) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

{{/*
The webhook's CA and serving certificate when the chart makes them, as
JSON {ca, crt, key} (PEM). Computed once per render (kept in .Values, so
the Secret, each caBundle and the pods' checksum agree), and taken from the
existing Secret on upgrade while it names the same hosts, so an upgrade
does not rotate it.
*/}}
{{- define "sluice.webhookCertificate" -}}
{{- if not (hasKey .Values "__webhookCertificate") -}}
{{- $hosts := include "sluice.webhookHosts" . -}}
{{- $c := dict -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "sluice.webhookCertSecret" .) -}}
{{- $oldHosts := "" -}}
{{- if $old -}}{{- $oldHosts = index ($old.metadata.annotations | default dict) "sluice.dev/webhook-hosts" | default "" -}}{{- end -}}
{{- if and $old (eq $oldHosts $hosts) (hasKey ($old.data | default dict) "ca.crt") -}}
{{- $c = dict "ca" (index $old.data "ca.crt" | b64dec) "crt" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $list := list -}}
{{- range splitList "," $hosts }}{{ $list = append $list . }}{{ end -}}
{{- $days := int .Values.webhook.certValidityDays -}}
{{- $ca := genCA (printf "%s-webhook-ca" (include "sluice.fullname" .)) $days -}}
{{- $cert := genSignedCert (first $list) nil $list $days $ca -}}
{{- $c = dict "ca" $ca.Cert "crt" $cert.Cert "key" $cert.Key -}}
{{- end -}}
{{- $_ := set .Values "__webhookCertificate" $c -}}
{{- end -}}
{{- toJson (get .Values "__webhookCertificate") -}}
{{- end -}}

{{/*
One entry of a kind's MutatingWebhookConfiguration: dict "root" $ "kind"
(a line of the kinds table) "service" "ca" "name" "selector" (the
objectSelector's matchExpressions), "operations" and, optionally,
"condition" (a CEL match condition).
*/}}
{{/*
The namespaces where jobs without a queue label are defaulted or held:
managedJobsNamespaceSelector, or all but the cluster's, Kueue's, Sluice's
and the release's own.
*/}}
{{- define "sluice.managedNamespaces" -}}
{{- if .Values.managedJobsNamespaceSelector -}}
{{- toYaml .Values.managedJobsNamespaceSelector -}}
{{- else -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ toJson (uniq (list "kube-system" "kueue-system" "sluice-system" .Release.Namespace)) }}
{{- end -}}
{{- end -}}

{{- define "sluice.webhookEntry" -}}
{{- $v := .root.Values -}}
- name: {{ .name }}
  admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: {{ .service }}
      namespace: {{ .root.Release.Namespace }}
      path: {{ .kind.path }}
      port: 443
    {{- if not $v.webhook.certManager.enabled }}
    caBundle: {{ .ca | b64enc }}
    {{- end }}
  rules:
    - operations: [{{ join ", " .operations }}]
      apiGroups: [{{ .kind.group | quote }}]
      apiVersions: [{{ .kind.version | quote }}]
      resources: [{{ .kind.resource }}]
      scope: Namespaced
  failurePolicy: {{ .failurePolicy | default "Fail" }}
  matchPolicy: Equivalent
  sideEffects: None
  timeoutSeconds: {{ $v.webhook.timeoutSeconds }}
  reinvocationPolicy: Never
  namespaceSelector:
    {{- if .namespaceSelector }}
    {{- .namespaceSelector | nindent 4 }}
    {{- else }}
    {{- toYaml $v.webhook.namespaceSelector | nindent 4 }}
    {{- end }}
  objectSelector:
    matchExpressions:
      {{- toYaml .selector | nindent 6 }}
  {{- with .condition }}
  matchConditions:
    - name: changes-something
      expression: {{ . | quote }}
  {{- end }}
{{- end -}}


{{/*
The pending API's CA and serving certificate, for admission's Service, as
JSON {ca, crt, key} (PEM): computed once per render and kept from the
existing Secret on upgrade while it names the same host, as the webhook's.
*/}}
{{- define "sluice.visibilityCertificate" -}}
{{- if not (hasKey .Values "__visibilityCertificate") -}}
{{- $svc := printf "%s-admission" (include "sluice.fullname" .) -}}
{{- $host := printf "%s.%s.svc" $svc .Release.Namespace -}}
{{- $c := dict -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace (printf "%s-visibility-cert" (include "sluice.fullname" .)) -}}
{{- $oldHost := "" -}}
{{- if $old -}}{{- $oldHost = index ($old.metadata.annotations | default dict) "sluice.dev/visibility-host" | default "" -}}{{- end -}}
{{- if and $old (eq $oldHost $host) (hasKey ($old.data | default dict) "ca.crt") -}}
{{- $c = dict "ca" (index $old.data "ca.crt" | b64dec) "crt" (index $old.data "tls.crt" | b64dec) "key" (index $old.data "tls.key" | b64dec) -}}
{{- else -}}
{{- $days := int .Values.admission.visibility.certValidityDays -}}
{{- $ca := genCA (printf "%s-visibility-ca" (include "sluice.fullname" .)) $days -}}
{{- $cert := genSignedCert $host nil (list $host (printf "%s.cluster.local" $host)) $days $ca -}}
{{- $c = dict "ca" $ca.Cert "crt" $cert.Cert "key" $cert.Key -}}
{{- end -}}
{{- $_ := set .Values "__visibilityCertificate" $c -}}
{{- end -}}
{{- toJson (get .Values "__visibilityCertificate") -}}
{{- end -}}

{{/*
Startup probe failures (every 2 s) the pods allow: startupWait (a Go
duration of minutes and seconds, e.g. 4m or 90s) and a minute more.
*/}}
{{- define "sluice.startupProbeFailures" -}}
{{- $w := .Values.startupWait | toString -}}
{{- $secs := 0 -}}
{{- with regexFind "[0-9]+m" $w }}{{ $secs = add $secs (mul (trimSuffix "m" .) 60) }}{{ end -}}
{{- with regexFind "[0-9]+s" $w }}{{ $secs = add $secs (trimSuffix "s" .) }}{{ end -}}
{{- div (add $secs 60) 2 -}}
{{- end -}}
