{{/* The driver's name: fixed, the daemon registers itself under it. */}}
{{- define "zfs-csi.driver" -}}zfs.csi.dev{{- end -}}

{{/* The host directory of the daemon's Kubernetes socket. */}}
{{- define "zfs-csi.socketDir" -}}{{ trimSuffix "/" .Values.kubeletDir }}/plugins/{{ include "zfs-csi.driver" . }}{{- end -}}

{{/* The topology key the daemon reports; kubelet labels each node that runs
it with this key when the daemon registers. */}}
{{- define "zfs-csi.topologyKey" -}}{{ include "zfs-csi.driver" . }}/node{{- end -}}

{{/*
The labels of every object: the plain manifests' (app.kubernetes.io/name and
part-of) and the release's. The DaemonSet and its pods are named
zfs-csi-sidecars (their selector, which cannot change on upgrade); pass
"name" to override. packaging/kubernetes/helm_test.go compares the render
with the plain manifests without the release's labels.
*/}}
{{- define "zfs-csi.labels" -}}
{{- $ctx := .ctx | default . -}}
app.kubernetes.io/name: {{ .name | default "zfs-csi" }}
app.kubernetes.io/part-of: zfs-csi
{{ include "zfs-csi.releaseLabels" $ctx }}
{{- end -}}

{{/* What Helm adds to the plain manifests' labels. */}}
{{- define "zfs-csi.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* An image reference from repository and tag. */}}
{{- define "zfs-csi.image" -}}
image: {{ printf "%s:%s" .repository .tag }}
imagePullPolicy: {{ .pullPolicy }}
{{- end -}}

{{/* Whether the cluster serves the snapshot API (the snapshot CRDs); helm
template asks --api-versions snapshot.storage.k8s.io/v1. */}}
{{- define "zfs-csi.hasSnapshotAPI" -}}
{{- if .Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1" }}true{{ end -}}
{{- end -}}

{{/* Whether the cluster serves the group snapshot API (its CRDs);
helm template asks --api-versions groupsnapshot.storage.k8s.io/v1. */}}
{{- define "zfs-csi.hasGroupSnapshotAPI" -}}
{{- if .Capabilities.APIVersions.Has "groupsnapshot.storage.k8s.io/v1" }}true{{ end -}}
{{- end -}}

{{/* The API version under which the cluster serves MutatingAdmissionPolicy,
or nothing: v1 (GA and on by default from Kubernetes 1.36) where it has it,
else v1beta1 (beta and off by default in 1.34 and 1.35). helm template asks
--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy (or
.../v1beta1/MutatingAdmissionPolicy). */}}
{{- define "zfs-csi.mutatingPolicyAPI" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* Whether the cluster serves MutatingAdmissionPolicy at all. */}}
{{- define "zfs-csi.hasMutatingPolicy" -}}
{{- if (include "zfs-csi.mutatingPolicyAPI" .) }}true{{ end -}}
{{- end -}}

{{/* Whether the cluster has ValidatingAdmissionPolicy v1 (Kubernetes 1.30+);
helm template asks --kube-version. */}}
{{- define "zfs-csi.hasAdmissionPolicy" -}}
{{- if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) }}true{{ end -}}
{{- end -}}

{{/* What every sidecar shares: security context, resources, the socket. */}}
{{- define "zfs-csi.sidecar" -}}
securityContext:
  runAsUser: 0
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  {{- with .Values.seLinuxType }}
  seLinuxOptions:
    type: {{ . }}
  {{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
volumeMounts:
  - name: socket-dir
    mountPath: /csi
{{- end -}}

{{/* The labels a Prometheus selects its ScrapeConfigs and PrometheusRules
by: kube-prometheus-stack's is release=<its release name>. */}}
{{- define "zfs-csi.monitoringLabels" -}}
{{- with .Values.metrics.release }}
release: {{ . }}
{{- end }}
{{- with .Values.metrics.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
