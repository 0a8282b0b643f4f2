{{- define "vpo.fullname" -}}
{{- if .Values.fullnameOverride -}}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The webhook's Service DNS names and, with webhook.url, its host: what the serving certificate is for. */ -}}
{{- define "vpo.webhookNames" -}}
{{- $svc := printf "%s.%s.svc" (include "vpo.fullname" .) .Release.Namespace -}}
{{- $names := list $svc (printf "%s.cluster.local" $svc) -}}
{{- with .Values.webhook.url }}{{ $names = append $names (urlParse .).hostname }}{{ end -}}
{{- toJson $names -}}
{{- end -}}

{{- define "vpo.replicas" -}}
{{- /* replicas: the name before 0.3.0, still accepted */ -}}
{{- if hasKey .Values "replicas" }}{{ .Values.replicas | int }}{{ else }}{{ .Values.replicaCount | int }}{{ end -}}
{{- end -}}

{{- define "vpo.serviceAccountName" -}}
{{- default (include "vpo.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "vpo.labels" -}}
app.kubernetes.io/name: vllm-pooling-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "vpo.selector" -}}
app.kubernetes.io/name: vllm-pooling-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vpo.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default (printf "v%s" .Chart.AppVersion) .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/*
The operator's permissions: the one source of its RBAC (deploy/rbac.yaml is rendered from this chart).
"namespaced" rules apply where services live (a ClusterRole in cluster-wide mode, a Role per watched
namespace otherwise); "cluster" rules are always cluster-wide; the Lease and the Prometheus credentials
are read in the release's namespace only (templates/rbac.yaml).
*/}}
{{- define "vpo.namespacedRules" -}}
# Our namespaced resources: read them, write only their status.
- apiGroups: [vllm-pooling.io]
  resources: [poolingservices, scoringservices, hiddenstatejobs, poolingjobs, modelcaches]
  verbs: [get, list, watch]
- apiGroups: [vllm-pooling.io]
  resources: [poolingservices/status, scoringservices/status, hiddenstatejobs/status, poolingjobs/status, modelcaches/status]
  verbs: [get, patch, update]
# The children it creates, changes and deletes.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [services, serviceaccounts, configmaps]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, update, delete]
# A ModelCache's claim when it asks for one by size (never an existing claim it names).
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, update, delete]
# A HiddenStateJob's Role lets its pods patch their progress ConfigMap; granting that needs these.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [servicemonitors, podmonitors]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [keda.sh]
  resources: [scaledobjects]
  verbs: [get, list, watch, create, patch, update, delete]
# The KEDA HTTP add-on's route for a service whose front it is (autoscaling.front.kedaHttpAddOn).
- apiGroups: [http.keda.sh]
  resources: [interceptorroutes]
  verbs: [get, list, watch, create, patch, update, delete]
# Kueue's view of the jobs with spec.queue (their Queued condition): read only, never written.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads, localqueues]
  verbs: [get, list, watch]
# A DRA GPU share: each service's ResourceClaimTemplate (the scheduler's DRA plugin makes the claims).
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [get, list, watch, create, patch, update, delete]
# Observed, never written: pods for crash loops; events are posted.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# The space gate's verdict on a pod of a service with spec.spaceCheck (its readiness gate's condition).
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, list]  # list: a Job's FailedCreate is reported only as an event
{{- end -}}

{{- define "vpo.clusterRules" -}}
# AutoscalingPolicy is cluster-scoped.
- apiGroups: [vllm-pooling.io]
  resources: [autoscalingpolicies]
  verbs: [get, list, watch]
- apiGroups: [vllm-pooling.io]
  resources: [autoscalingpolicies/status]
  verbs: [get, patch, update]
# kopf: discovering resources and namespaces.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
{{- include "vpo.webhookRules" . }}
{{- end -}}

{{- define "vpo.ownNamespaceRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- if .Values.webhook.enabled }}
# The webhook's serving certificate: filled and renewed by the operator (read only with cert-manager).
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [{{ include "vpo.fullname" . }}-webhook-cert]
  verbs: [get, patch]
{{- end }}
{{- end -}}

{{- /* The operator's own webhook registration: its caBundle is the operator's to keep (without cert-manager). */ -}}
{{- define "vpo.webhookRules" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) }}
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingwebhookconfigurations]
  resourceNames: [{{ include "vpo.fullname" . }}]
  verbs: [get, patch]
{{- end }}
{{- end -}}
