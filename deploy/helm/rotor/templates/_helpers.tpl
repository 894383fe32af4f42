{{/*
The labels every object carries: the kustomize base's part-of, and Helm's own.
*/}}
{{- define "rotor.labels" -}}
app.kubernetes.io/part-of: rotor
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "rotor.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
A map of flags as command-line arguments, in name order: `true` is the bare switch, `false`
and null leave the flag out, a list repeats it, anything else is --name=value.
*/}}
{{- define "rotor.flags" -}}
{{- range $name, $value := . }}
{{- if kindIs "bool" $value }}
{{- if $value }}
- --{{ $name }}
{{- end }}
{{- else if kindIs "slice" $value }}
{{- range $value }}
- {{ printf "--%s=%v" $name . | quote }}
{{- end }}
{{- else if not (kindIs "invalid" $value) }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Lease the drainer elects its leader on; its Role names it, and the rotation record. */}}
{{- define "rotor.leaseName" -}}
{{ index .Values.drainer.flags "lease-name" | default "rotor-drainer" }}
{{- end }}

{{- define "rotor.surgePriorityClass" -}}
{{ index .Values.drainer.flags "surge-priority-class" | default "rotor-surge" }}
{{- end }}

{{- define "rotor.adminPort" -}}
{{ splitList ":" (index .Values.drainer.flags "admin-listen" | default "0.0.0.0:8080") | last }}
{{- end }}

{{/* The securityContext both containers run with: the restricted Pod Security Standard. */}}
{{- define "rotor.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "rotor.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The egress both pods need: the API server (TCP 443 and 6443 to any address, since a
NetworkPolicy cannot name it) and DNS in kube-system. */}}
{{- define "rotor.networkPolicy.baseEgress" -}}
- ports:
    - protocol: TCP
      port: 443
    - protocol: TCP
      port: 6443
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}
