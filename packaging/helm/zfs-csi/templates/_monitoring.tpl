{{/* Whether the cluster serves prometheus-operator's kinds the chart
renders: its CRDs may be missing (metrics.enabled on a cluster without the
operator), and an object of a kind the cluster lacks fails the whole install.
helm template asks --api-versions monitoring.coreos.com/v1/PrometheusRule and
--api-versions monitoring.coreos.com/v1alpha1/ScrapeConfig; helm install reads
them from the cluster. */}}
{{- define "zfs-csi.hasPrometheusRule" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}true{{ end -}}
{{- end -}}

{{- define "zfs-csi.hasScrapeConfig" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1alpha1/ScrapeConfig" }}true{{ end -}}
{{- end -}}
