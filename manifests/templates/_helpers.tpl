{{/* Labels of every object of the chart. */}}
{{- define "nodeforge.labels" -}}
app.kubernetes.io/part-of: nodeforge
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The commonAnnotations, as a metadata field, if there are any. */}}
{{- define "nodeforge.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Labels of one program's objects: (list $ "scheduler"). */}}
{{- define "nodeforge.componentLabels" -}}
{{ include "nodeforge.labels" (index . 0) }}
app.kubernetes.io/name: nodeforge-{{ index . 1 }}
{{- end }}

{{/* Selector labels of one program: (list $ "scheduler"). */}}
{{- define "nodeforge.selector" -}}
app.kubernetes.io/name: nodeforge-{{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end }}

{{/*
The scheduler's KubeSchedulerConfiguration, as YAML: the shipped
scheduler/config.yaml (which the sandbox's processes use as it is), with
leader election in this namespace, profiling as scheduler.profiling says,
VirtualNodes' arguments and the extra profiles and plugin configuration
of the values. The scheduler's ConfigMap holds it, and both programs' pod
templates carry its checksum: the provisioner reads it once, at start, to
judge binds by.
*/}}
{{- define "nodeforge.schedulerConfig" -}}
{{- $v := .Values.scheduler -}}
{{- $cfg := fromYaml (.Files.Get "scheduler/config.yaml") -}}
{{- $_ := set $cfg.leaderElection "resourceNamespace" .Release.Namespace -}}
{{- $_ := set $cfg "enableProfiling" (eq $v.profiling true) -}}
{{- $profile := index $cfg.profiles 0 -}}
{{- range $pc := $profile.pluginConfig }}
{{- if eq $pc.name "VirtualNodes" }}
{{- $_ := set $pc "args" (merge (deepCopy $v.virtualNodesArgs) $pc.args) }}
{{- if $.Values.provisioningRequests.enabled }}
{{- $_ := set $pc.args "provisioningRequests" true }}
{{- end }}
{{- if $.Values.capacityBuffers.enabled }}
{{- $_ := set $pc.args "capacityBuffers" true }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $profile "pluginConfig" (concat $profile.pluginConfig $v.extraPluginConfig) -}}
{{- $_ := set $cfg "profiles" (concat $cfg.profiles $v.extraProfiles) -}}
{{- toYaml $cfg -}}
{{- end }}

{{/*
The image of one program: (list $ "scheduler"). No repository is assumed:
a default name would be pulled from whoever registered it, and run with
the programs' rights. A digest, when given, pins the image.
*/}}
{{- define "nodeforge.image" -}}
{{- $root := index . 0 -}}{{- $program := index . 1 -}}
{{- $image := $root.Values.image -}}
{{- $repository := required "image.repository is required: the project publishes no images. Build them with make images, push bin/images/nodeforge-scheduler and bin/images/nodeforge-provisioner to a registry of yours (docs/install.md, Images), and set image.repository=REGISTRY/nodeforge" $image.repository -}}
{{- $digests := default (dict) $image.digests -}}
{{- $digest := default "" (get $digests $program) -}}
{{- range $p := list "scheduler" "provisioner" }}
{{- $d := default "" (get $digests $p) }}
{{- if and $d (not (regexMatch "^sha256:[0-9a-f]{64}$" $d)) }}
{{- fail (printf "image.digests.%s %q is not a digest: want sha256: and 64 lower-case hex digits, as make images prints" $p $d) }}
{{- end }}
{{- end }}
{{- if and (or $digests.scheduler $digests.provisioner) (not (and $digests.scheduler $digests.provisioner)) }}
{{- fail "image.digests: set both scheduler and provisioner, or neither (bin/images/digests.yaml from make images holds both)" }}
{{- end }}
{{- if $digest -}}
{{- printf "%s-%s@%s" $repository $program $digest -}}
{{- else -}}
{{- printf "%s-%s:%s" $repository $program (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end }}

{{/*
The objects of a YAML file of this chart (the RBAC files the sandbox
applies as they are: one source), for this release: what they put in
namespace "nodeforge" goes in the release's namespace, ServiceAccounts get
the annotations of their program's values, everything gets the chart's
labels. (list $ "scheduler/rbac.yaml")
*/}}
{{- define "nodeforge.fromFile" -}}
{{- $root := index . 0 -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get (index . 1)) -1 }}
{{- $o := fromYaml $doc }}
{{- if and $o (hasKey $o "kind") (not (hasKey $o "Error")) }}
{{- if eq (dig "metadata" "namespace" "" $o) "nodeforge" }}
{{- $_ := set $o.metadata "namespace" $root.Release.Namespace }}
{{- end }}
{{- range $s := (default (list) $o.subjects) }}
{{- if eq (default "" $s.namespace) "nodeforge" }}
{{- $_ := set $s "namespace" $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- if eq $o.kind "ServiceAccount" }}
{{- $values := ternary $root.Values.scheduler $root.Values.provisioner (eq $o.metadata.name "nodeforge-scheduler") }}
{{- with $values.serviceAccount.annotations }}
{{- $_ := set $o.metadata "annotations" (merge (deepCopy .) (default (dict) $o.metadata.annotations)) }}
{{- end }}
{{- end }}
{{- $_ := set $o.metadata "labels" (merge (default (dict) $o.metadata.labels) (include "nodeforge.labels" $root | fromYaml)) }}
{{- with $root.Values.commonAnnotations }}
{{- $_ := set $o.metadata "annotations" (merge (default (dict) $o.metadata.annotations) (deepCopy .)) }}
{{- end }}
---
{{ toYaml $o }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Pod placement of one program: (list $ "scheduler" $values). Off the nodes
Nodeforge manages (a node it launched must not carry the program that
decides whether it stays), and replicas apart as spreadReplicas says:
required, never two on one node and zones at most one replica apart, so
that losing a node or a zone leaves one running; preferred, the same
where the cluster allows it.
*/}}
{{- define "nodeforge.placement" -}}
{{- $root := index . 0 -}}{{- $name := index . 1 -}}{{- $v := index . 2 -}}
{{- if $v.affinity.nodeAffinity }}
{{- fail (printf "%s.affinity.nodeAffinity is not supported: use %s.nodeSelector (the chart's own node affinity keeps the pods off the nodes Nodeforge manages)" $name $name) }}
{{- end }}
{{- $spread := $root.Values.spreadReplicas }}
{{- if not (has $spread (list "required" "preferred")) }}
{{- fail (printf "spreadReplicas %q: choose required (replicas on different nodes and spread across zones, or Pending) or preferred (apart where the cluster allows it, e.g. a cluster of one node)" (toString $spread)) }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: nodeforge.dev/nodepool, operator: DoesNotExist}
  {{- if $v.affinity.podAntiAffinity }}
  podAntiAffinity:
    {{- toYaml $v.affinity.podAntiAffinity | nindent 4 }}
  {{- else if eq $spread "required" }}
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "nodeforge.selector" (list $root $name) | nindent 10 }}
  {{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "nodeforge.selector" (list $root $name) | nindent 12 }}
  {{- end }}
  {{- with $v.affinity.podAffinity }}
  podAffinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- if $root.Values.topologySpread }}
topologySpreadConstraints:
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: {{ ternary "DoNotSchedule" "ScheduleAnyway" (eq $spread "required") }}
  # Zones count only by the nodes the pods may run on: a zone of nodes
  # they do not tolerate does not hold a replica back.
  nodeTaintsPolicy: Honor
  labelSelector:
    matchLabels:
      {{- include "nodeforge.selector" (list $root $name) | nindent 6 }}
{{- end }}
{{- end }}

{{/*
The environment of one program's container (its values): GOMEMLIMIT
from its memory limit, unless its env names GOMEMLIMIT, then its env.
*/}}
{{- define "nodeforge.env" -}}
{{- $own := false -}}
{{- range $e := (default (list) .env) }}
{{- if eq $e.name "GOMEMLIMIT" }}{{ $own = true }}{{ end }}
{{- end }}
{{- $env := list -}}
{{- $limit := dig "limits" "memory" "" (default (dict) .resources) -}}
{{- if and $limit (not $own) }}
{{- $env = append $env (dict "name" "GOMEMLIMIT" "value" (include "nodeforge.gomemlimit" $limit)) }}
{{- end }}
{{- $env = concat $env (default (list) .env) }}
{{- with $env }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT for a container's memory limit: 90% of it, in MiB. The Go
runtime's soft limit counts only the memory the runtime manages; the Go
GC guide advises 5-10% of headroom below the container's limit for the
rest, so that the collector works harder before the kernel kills. A
resourceFieldRef would give the limit itself, with no headroom.
*/}}
{{- define "nodeforge.gomemlimit" -}}
{{- $q := toString . -}}
{{- $bytes := 0.0 -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}
{{- $bytes = float64 . }}
{{- else }}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $suffix := trimPrefix $n $q }}
{{- $units := dict "" 1.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 }}
{{- if or (not $n) (not (hasKey $units $suffix)) }}
{{- fail (printf "memory limit %q: the chart reads a number of bytes, or one with a suffix k, M, G, T, Ki, Mi, Gi or Ti, to set GOMEMLIMIT from" $q) }}
{{- end }}
{{- $bytes = mulf (float64 $n) (index $units $suffix) }}
{{- end }}
{{- printf "%dMiB" (int64 (floor (divf (mulf $bytes 0.9) 1048576.0))) }}
{{- end }}

{{/* The restricted Pod Security Standard, for the pod and its container. */}}
{{- define "nodeforge.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}
{{- define "nodeforge.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/*
The scheduler's feature gates, from featureGates, given to both programs:
the provisioner's simulation runs the scheduler's plugins, and must run
them with the gates the scheduler has. A --feature-gates among one
program's extraArgs is refused, as it would reach that program alone.
Called with (list $ $v), $v the program's values.
*/}}
{{- define "nodeforge.featureGatesArgs" -}}
{{- $ := index . 0 }}{{- $v := index . 1 }}
{{- range $v.extraArgs }}
{{- if hasPrefix "--feature-gates" (toString .) }}
{{- fail (printf "extraArgs %q: set featureGates instead, which both programs get (the provisioner simulates the scheduler with the same gates)" .) }}
{{- end }}
{{- end }}
{{- with $.Values.featureGates }}
{{- $pairs := list }}
{{- range $k := keys . | sortAlpha }}
{{- $val := index $.Values.featureGates $k }}
{{- if not (kindIs "bool" $val) }}
{{- fail (printf "featureGates.%s %v: want true or false" $k $val) }}
{{- end }}
{{- $pairs = append $pairs (printf "%s=%t" $k $val) }}
{{- end }}
- --feature-gates={{ join "," $pairs }}
{{- end }}
{{- end }}
