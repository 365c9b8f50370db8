package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// block is one fenced block of a Markdown file: its tag and its text.
type block struct {
	tag, text string
}

// fencedBlocks reads the fenced blocks of a Markdown file, in order.
func fencedBlocks(t *testing.T, path string) []block {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{tag: strings.TrimPrefix(line, "```")}
		case cur != nil && strings.HasPrefix(line, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return out
}

// unqualified finds a kubectl command naming a Nodeforge resource by its
// bare plural or singular, which beside Karpenter (same plurals) may reach
// Karpenter's.
// A group qualifies a resource when it follows the name (nodepools.nodeforge.dev,
// Karpenter's nodepools.karpenter.sh) or as --api-version.
var unqualified = regexp.MustCompile(`kubectl\b[^\n|]*?\b(nodepools?|nodeclaims?|ec2nodeclass(?:es)?|instancetypecatalogs?|simulatednodeclass(?:es)?|nodeoverlays?)\b(\.[a-z0-9-]+\.[a-z0-9.-]+|[^\n|]*--api-version=nodeforge\.dev)?`)

// TestDocsNameNodeforgeResourcesByGroup: every kubectl command in the
// README, docs/ and the chart's NOTES that names a Nodeforge resource names it with its
// group, since Karpenter's resources have the same plurals and a bare
// `kubectl delete nodepools --all` beside Karpenter may delete Karpenter's.
func TestDocsNameNodeforgeResourcesByGroup(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(source, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(source, "README.md"), filepath.Join(source, "manifests", "README.md"), filepath.Join(source, "manifests", "templates", "NOTES.txt"))
	checked := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range unqualified.FindAllStringSubmatch(string(raw), -1) {
			checked++
			if m[2] == "" {
				t.Errorf("%s: %q names %s without its group (%s.nodeforge.dev)", filepath.Base(f), m[0], m[1], m[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no kubectl command naming a Nodeforge resource found; the check reads nothing")
	}
}

// TestInstallGuideOnTheFakes walks docs/install.md as an EKS user would, on
// the sandbox with the chart installed and the AWS provider, against fakes that speak EC2's, IAM's,
// SSM's, EKS's and SQS's wire protocols. The sandbox's own example pool and
// class are deleted first, as a new cluster has none. Every Kubernetes
// manifest of the guide is applied: the EC2NodeClass, NodePool and
// Deployment for real, the rest (aws-auth) as a server-side dry run. The
// class must become Ready with the instance profile it made for its role,
// and the workload run; the guide's kubectl commands for following the
// decisions must answer; the uninstall steps, run as written, must leave
// no instance, launch template or instance profile. The guide's aws, helm
// and eksctl commands are not run: no fake models IAM roles and policies,
// EKS access entries and add-ons, or EventBridge.
func TestInstallGuideOnTheFakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The chart installed as the guide installs it, on the AWS provider.
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "aws", Install: true, AWSRegistrationDelay: time.Second})
	blocks := fencedBlocks(t, filepath.Join(source, "docs", "install.md"))
	placeholders := strings.NewReplacer("CLUSTER", sandbox.ClusterName, "NODE_ROLE", sandbox.NodeRole, "ACCOUNT", "000000000000", "REGION", "us-west-2")
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", sb.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Dir = source
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// A new cluster has no pool or class: take the sandbox's example away.
	kubectl("", "delete", "nodepools.nodeforge.dev", "default")
	kubectl("", "delete", "ec2nodeclasses.nodeforge.dev", "default")
	kubectl("", "wait", "--for=delete", "ec2nodeclasses.nodeforge.dev/default", "--timeout=2m")

	applied, dryRun := 0, 0
	for _, b := range blocks {
		if b.tag != "yaml" {
			continue
		}
		text := placeholders.Replace(b.text)
		for _, doc := range strings.Split(text, "\n---\n") {
			var obj unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil || obj.GetKind() == "" {
				t.Fatalf("a yaml block of docs/install.md is not a Kubernetes object (%v):\n%s", err, doc)
			}
			switch obj.GetKind() {
			case "EC2NodeClass", "NodePool", "Deployment":
				kubectl(doc, "apply", "-f", "-")
				applied++
			default:
				kubectl(doc, "apply", "--dry-run=server", "-f", "-")
				dryRun++
			}
		}
	}
	if applied < 3 {
		t.Fatalf("applied %d objects of the guide, want its EC2NodeClass, NodePool and Deployment", applied)
	}
	profile := aws.InstanceProfileName(sandbox.ClusterName, "default")
	var class v1alpha1.EC2NodeClass
	poll(t, "the guide's EC2NodeClass Ready, with its instance profile", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &class); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(class.Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue && class.Status.InstanceProfile == profile, nil
	})
	if ps := sb.IAM.InstanceProfiles(); len(ps) != 1 || ps[0].Name != profile {
		t.Fatalf("instance profiles %+v, want %s", ps, profile)
	}
	poll(t, "the guide's inflate pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=inflate")
		return n == 5, err
	})

	// The guide's kubectl commands, in order: those that read (following
	// the decisions) before the uninstall, then the uninstall's.
	ran := 0
	for _, b := range blocks {
		if b.tag != "sh" {
			continue
		}
		for _, line := range strings.Split(b.text, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "kubectl ") || strings.HasSuffix(line, "\\") {
				continue
			}
			fields := strings.Fields(line)
			verb := fields[1]
			if verb == "-n" && len(fields) > 3 {
				verb = fields[3]
			}
			switch verb {
			case "logs", "get", "delete", "wait", "rollout":
			default:
				continue // edit, apply of files, explain: interactive or done above
			}
			if strings.Contains(line, " -f manifests/crd") || strings.Contains(line, "delete crd ") || strings.Contains(line, ".karpenter.") {
				continue // the sandbox's CRDs stay until it stops; it has no Karpenter
			}
			cmd := exec.Command("sh", "-c", line)
			cmd.Dir = source
			cmd.Env = append(os.Environ(), "KUBECONFIG="+sb.Kubeconfig, "CLUSTER="+sandbox.ClusterName)
			out, err := cmd.CombinedOutput()
			if err != nil || (strings.Contains(line, "| grep") && len(strings.TrimSpace(string(out))) == 0) {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			ran++
		}
	}
	if ran < 6 {
		t.Errorf("ran %d kubectl commands of the guide; it has more than that", ran)
	}
	live := 0
	for _, in := range sb.EC2.Instances() {
		if in.State != "terminated" && in.State != "shutting-down" {
			live++
		}
	}
	if live != 0 || len(sb.EC2.LaunchTemplates()) != 0 || len(sb.IAM.InstanceProfiles()) != 0 {
		t.Errorf("after the guide's uninstall: %d instances, %d launch templates, %d instance profiles left; want none", live, len(sb.EC2.LaunchTemplates()), len(sb.IAM.InstanceProfiles()))
	}
	t.Logf("docs/install.md: %d objects applied, %d dry-run on the server, %d kubectl commands run; left 0 instances, 0 templates, 0 profiles", applied, dryRun, ran)
}
