{{/* Full name of the release's objects. */}}
{{- define "topodra.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "topodra.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "topodra.labels" -}}
{{ include "topodra.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "topodra.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "topodra.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The arguments of `topodra run`, one per line, as a YAML list. Only flags `topodra run --help`
shows (test/chart checks that against the real binary); empty values are left out so the
daemon's default applies. --node-name comes from the downward API.
*/}}
{{- define "topodra.args" -}}
- run
- --node-name=$(NODE_NAME)
- --cpu-driver-name={{ .Values.publish.cpuDriverName }}
- --gpu-driver-name={{ .Values.publish.gpuDriverName }}
- --cpu-device-mode={{ .Values.publish.cpuDeviceMode }}
- --group-by={{ .Values.publish.groupBy }}
{{- with .Values.publish.reservedCpus }}
- --reserved-cpus={{ . }}
{{- end }}
- --gpus={{ .Values.publish.gpus }}
- --slice-mixins={{ .Values.publish.sliceMixins }}
- --list-attributes={{ .Values.publish.listAttributes }}
- --node-allocatable-mapping={{ .Values.publish.nodeAllocatableMapping }}
- --topology-refresh={{ .Values.publish.topologyRefresh }}
- --kubelet-root-dir={{ .Values.kubelet.rootDir }}
- --cdi-dir={{ .Values.kubelet.cdiDir }}
- --state-dir={{ .Values.kubelet.stateDir }}
- --host-root={{ .Values.kubelet.hostRoot }}
- --device-metadata={{ if .Values.kubelet.deviceMetadata }}on{{ else }}off{{ end }}
{{- with .Values.kubelet.deviceMetadataDir }}
- --device-metadata-dir={{ . }}
{{- end }}
- --device-plugin={{ .Values.devicePlugin.mode }}
{{- if ne .Values.devicePlugin.mode "none" }}
- --device-plugin-gpu-resource={{ .Values.devicePlugin.gpuResource }}
- --device-plugin-cpu-resource={{ .Values.devicePlugin.cpuResource }}
- --device-plugin-reclaim-interval={{ .Values.devicePlugin.reclaimInterval }}
{{- with .Values.devicePlugin.podResourcesSocket }}
- --pod-resources-socket={{ . }}
{{- end }}
- --extended-resource-check={{ .Values.devicePlugin.extendedResourceCheck }}
{{- end }}
- --enforce={{ include "topodra.enforce" . }}
{{- if eq (include "topodra.enforce" .) "cgroup" }}
- --cgroup-root={{ .Values.cpuPinning.cgroupRoot }}
- --hook-dir={{ .Values.cpuPinning.hookDir }}
{{- if .Values.cpuPinning.strictCpuReservation }}
- --strict-cpu-reservation
{{- end }}
- --numa-memory={{ .Values.cpuPinning.numaMemory }}
{{- end }}
- --reservations={{ if .Values.reservations.enabled }}on{{ else }}off{{ end }}
- --reservation-taints={{ .Values.reservations.taints }}
- --dra-health={{ if .Values.deviceHealth.enabled }}on{{ else }}off{{ end }}
- --log-format={{ .Values.logging.format }}
{{- if eq (int .Values.logging.verbosity) 1 }}
- -v
{{- else if ge (int .Values.logging.verbosity) 2 }}
- -vv
{{- end }}
- --metrics-address=:{{ .Values.metrics.port }}
{{- if .Values.hostNetwork }}
- --health-address=127.0.0.1:{{ .Values.health.port }}
{{- else }}
- --health-address=:{{ .Values.health.port }}
{{- end }}
{{- with .Values.topology.file }}
- --topology-file={{ . }}
{{- end }}
{{- with .Values.topology.synthetic }}
- --topology-synthetic={{ . }}
{{- end }}
- --topology-cache={{ if .Values.topology.cache }}on{{ else }}off{{ end }}
{{- with .Values.kubeconfig }}
- --kubeconfig={{ . }}
{{- end }}
{{- if .Values.config }}
- --config=/etc/topodra/config.yaml
{{- end }}
{{- end -}}

{{/*
CPU pinning as the daemon will run it: a simulated machine (topology.file / topology.synthetic)
has CPU ids that are not this host's, and the daemon refuses to pin them on the host's cgroup
tree, so the chart renders enforce=none there whatever cpuPinning.enforce says.
*/}}
{{- define "topodra.enforce" -}}
{{- if or .Values.topology.file .Values.topology.synthetic -}}
none
{{- else -}}
{{ .Values.cpuPinning.enforce }}
{{- end -}}
{{- end -}}

{{/*
Refusals the values schema cannot express (it sees one value at a time). Each would otherwise
install a chart that fails later: the daemon exits on a port taken twice; a second DeviceClass
of the same name silently replaces the first; a --config key for a flag the chart already passes
is never read (the command line wins), so the operator's setting would be ignored without a word.
Included by the DaemonSet, which every install renders.
*/}}
{{- define "topodra.validate" -}}
{{- if eq (int .Values.health.port) (int .Values.metrics.port) -}}
{{- fail (printf "health.port and metrics.port are both %d: the daemon listens on each, so they must differ" (int .Values.health.port)) -}}
{{- end -}}
{{- if .Values.deviceClasses.create -}}
{{- $seen := dict -}}
{{- range $key := list "cpuName" "gpuName" "reservedCpuName" "reservedGpuName" -}}
{{- $name := get $.Values.deviceClasses $key -}}
{{- if hasKey $seen $name -}}
{{- fail (printf "deviceClasses.%s and deviceClasses.%s are both %q: each DeviceClass needs its own name" (get $seen $name) $key $name) -}}
{{- end -}}
{{- $_ := set $seen $name $key -}}
{{- end -}}
{{- include "topodra.validateExtendedResources" . -}}
{{- end -}}
{{- include "topodra.validateDeviceMetadataDir" . -}}
{{- $flags := list -}}
{{- range $arg := include "topodra.args" . | fromYamlArray -}}
{{- $flags = append $flags (regexReplaceAll "=.*$" (toString $arg) "") -}}
{{- end -}}
{{- range $key, $_ := .Values.config -}}
{{- if has (printf "--%s" $key) $flags -}}
{{- fail (printf "config.%s: the chart already passes --%s on the command line, which wins over --config; set the chart's own value for it instead" $key $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
kubelet.deviceMetadataDir is mounted at its own path beside the kubelet's plugin directory, the
CDI directory and the state directory: the same path twice is a pod the API server refuses
(duplicate mountPath), only at install.
*/}}
{{- define "topodra.validateDeviceMetadataDir" -}}
{{- with .Values.kubelet.deviceMetadataDir -}}
{{- $dir := trimSuffix "/" . -}}
{{- $k := $.Values.kubelet -}}
{{- if eq $dir (printf "%s/plugins" (trimSuffix "/" $k.rootDir)) -}}
{{- fail (printf "kubelet.deviceMetadataDir %q is the kubelet's plugin directory (kubelet.rootDir %q), which the chart mounts already: leave kubelet.deviceMetadataDir empty for it" . $k.rootDir) -}}
{{- end -}}
{{- range $key := list "cdiDir" "stateDir" -}}
{{- if eq $dir (trimSuffix "/" (get $k $key)) -}}
{{- fail (printf "kubelet.deviceMetadataDir and kubelet.%s are both %q: the pod would mount one path twice; give the device metadata a directory of its own" $key (get $k $key)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The DeviceClasses' extendedResourceName values (docs/user/dra-plugin.md#extended-resources).
The schema checks their form; here what it cannot: the length of the domain (the API server
checks "requests.<name>" as a qualified name, whose prefix has at most 253 characters), a name
mapped by both classes, a CPU mapping on grouped devices, and a name the device plugin would
register too: one node must not serve a resource name through both a device plugin and DRA.
*/}}
{{- define "topodra.validateExtendedResources" -}}
{{- $cpu := .Values.deviceClasses.cpuExtendedResourceName -}}
{{- $gpu := .Values.deviceClasses.gpuExtendedResourceName -}}
{{- range $key := list "cpuExtendedResourceName" "gpuExtendedResourceName" -}}
{{- $name := get $.Values.deviceClasses $key -}}
{{- if and $name (gt (len (printf "requests.%s" (regexReplaceAll "/.*$" $name ""))) 253) -}}
{{- fail (printf "deviceClasses.%s %q: the domain has more than 244 characters (the API server checks requests.<name> as a qualified name)" $key $name) -}}
{{- end -}}
{{- end -}}
{{- if and $cpu (eq $cpu $gpu) -}}
{{- fail (printf "deviceClasses.cpuExtendedResourceName and deviceClasses.gpuExtendedResourceName are both %q: one name maps one class" $cpu) -}}
{{- end -}}
{{- if and $cpu (ne .Values.publish.cpuDeviceMode "individual") -}}
{{- $group := get (dict "numa" "NUMA node" "numanode" "NUMA node" "socket" "socket" "machine" "machine") .Values.publish.groupBy -}}
{{- fail (printf "deviceClasses.cpuExtendedResourceName %q needs publish.cpuDeviceMode individual: a grouped CPU device is a whole %s, so a request for 2 would take two of them" $cpu $group) -}}
{{- end -}}
{{- $mode := .Values.devicePlugin.mode -}}
{{- range $kind := list "gpu" "cpu" -}}
{{- $resource := get $.Values.devicePlugin (printf "%sResource" $kind) -}}
{{- if and (has $kind (splitList "," $mode)) (or (eq $resource $cpu) (eq $resource $gpu)) -}}
{{- fail (printf "devicePlugin.%sResource %q is also a DeviceClass's extendedResourceName (deviceClasses.*ExtendedResourceName) while devicePlugin.mode is %s: a node must not serve one resource name through both a device plugin and DRA; clear the deviceClasses value or use another devicePlugin.%sResource" $kind $resource $mode $kind) -}}
{{- end -}}
{{- end -}}
{{- end -}}
