package eksnode

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// nodeConfig is what the fake node reads of nodeadm's NodeConfig
// (node.eks.aws/v1alpha1), the fields that change what the node reports.
type nodeConfig struct {
	Spec struct {
		Kubelet struct {
			Config            map[string]any `json:"config"`
			Flags             []string       `json:"flags"`
			MaxPodsExpression string         `json:"maxPodsExpression"`
		} `json:"kubelet"`
	} `json:"spec"`
}

// readUserData reads decoded user data as nodeadm does on an Amazon Linux
// 2023 image: a MIME multi-part document whose application/node.eks.aws
// parts are NodeConfigs, merged in order (a later part's kubelet config
// keys and max pods expression win, its flags come after the earlier
// ones'), and other parts (shell scripts) left to cloud-init. It returns
// the merged config and the labels and taints the kubelet's --node-labels
// and --register-with-taints flags register the node with; a flag given
// twice adds to the first.
//
// It is written from nodeadm's documented behaviour, not from the aws
// provider's writer, so a user data the provider writes wrongly fails here.
func readUserData(userData string) (nodeConfig, map[string]string, []corev1.Taint, error) {
	var merged nodeConfig
	msg, err := mail.ReadMessage(strings.NewReader(userData))
	if err != nil {
		return merged, nil, nil, fmt.Errorf("user data is not a MIME document: %w", err)
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mediaType, "multipart/") {
		return merged, nil, nil, fmt.Errorf("user data content type %q is not multipart", msg.Header.Get("Content-Type"))
	}
	parts := multipart.NewReader(msg.Body, params["boundary"])
	found := 0
	for {
		part, err := parts.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return merged, nil, nil, fmt.Errorf("user data part %d: %w", found+1, err)
		}
		if t, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type")); t != "application/node.eks.aws" {
			continue
		}
		body, err := io.ReadAll(part)
		if err != nil {
			return merged, nil, nil, err
		}
		var nc nodeConfig
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(string(body)), "---\n")), &nc); err != nil {
			return merged, nil, nil, fmt.Errorf("NodeConfig part: %w", err)
		}
		found++
		merge(&merged, nc)
	}
	if found == 0 {
		return merged, nil, nil, fmt.Errorf("user data has no application/node.eks.aws part")
	}
	labels, taints, err := registration(merged.Spec.Kubelet.Flags)
	return merged, labels, taints, err
}

func merge(into *nodeConfig, nc nodeConfig) {
	k := &into.Spec.Kubelet
	if len(nc.Spec.Kubelet.Config) > 0 {
		if k.Config == nil {
			k.Config = map[string]any{}
		}
		maps.Copy(k.Config, nc.Spec.Kubelet.Config)
	}
	k.Flags = append(k.Flags, nc.Spec.Kubelet.Flags...)
	if nc.Spec.Kubelet.MaxPodsExpression != "" {
		k.MaxPodsExpression = nc.Spec.Kubelet.MaxPodsExpression
	}
}

// registration reads the kubelet's --node-labels (key=value,…) and
// --register-with-taints (key[=value]:Effect,…) flags.
func registration(flags []string) (map[string]string, []corev1.Taint, error) {
	labels := map[string]string{}
	var taints []corev1.Taint
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--node-labels="); ok {
			for pair := range strings.SplitSeq(v, ",") {
				key, value, ok := strings.Cut(pair, "=")
				if !ok {
					return nil, nil, fmt.Errorf("--node-labels: %q is not key=value", pair)
				}
				labels[key] = value
			}
		}
		if v, ok := strings.CutPrefix(f, "--register-with-taints="); ok {
			for spec := range strings.SplitSeq(v, ",") {
				kv, effect, ok := strings.Cut(spec, ":")
				if !ok {
					return nil, nil, fmt.Errorf("--register-with-taints: %q has no effect", spec)
				}
				key, value, _ := strings.Cut(kv, "=")
				taints = append(taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)})
			}
		}
	}
	return labels, taints, nil
}
