{{/*
The logging flags both programs share (component-base's), from
logging.format: text, or json, one JSON object a line.
*/}}
{{- define "nodeforge.loggingArgs" -}}
{{- if not (has .Values.logging.format (list "text" "json")) }}
{{- fail (printf "logging.format %q: choose text or json" .Values.logging.format) }}
{{- end -}}
- --logging-format={{ .Values.logging.format }}
{{- end }}
