{{/* The driver's name: fixed, the daemon registers itself under it. */}}
{{- define "zfs-csi.driver" -}}zfs.csi.dev{{- end -}}

{{/* The host directory of the daemon's Kubernetes socket. */}}
{{- define "zfs-csi.socketDir" -}}{{ trimSuffix "/" .Values.kubeletDir }}/plugins/{{ include "zfs-csi.driver" . }}{{- end -}}

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
