package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../wfm"

// helmBinary returns the helm binary: $HELM, else helm on PATH. Without
// one the test is skipped, except in CI ($CI or $HELM set), where it fails:
// there the check must run.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		if _, err := os.Stat(h); err != nil {
			t.Fatalf("HELM=%s: %v (make helm-check installs it)", h, err)
		}
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("helm is not installed and CI is set: the chart must be checked in CI (make helm-check installs helm)")
		}
		t.Skip("helm is not installed: skipping the chart's render checks (make helm-check installs helm v4.3.1 and runs them)")
	}
	return h
}

// render runs helm template on the chart with the given values files and
// --set arguments and returns its output, or helm's error output.
func render(t *testing.T, valueFiles []string, sets ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "wfm", chartDir, "--namespace", "fleet"}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// manifests are the decoded objects of one rendering.
type manifests struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	networkPolicies []*networkingv1.NetworkPolicy
	serviceMonitors []*monitoringv1.ServiceMonitor
}

// decode splits helm's output into documents and decodes each strictly
// (yaml.UnmarshalStrict: unknown and duplicate fields are errors) into the
// Go type of its apiVersion and kind; a kind the chart should not render is
// an error too.
func decode(out []byte) (*manifests, error) {
	m := &manifests{}
	for i, doc := range strings.Split(string(out), "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			m.deployments, err = strict(doc, m.deployments)
		case "v1 Service":
			m.services, err = strict(doc, m.services)
		case "v1 Secret":
			m.secrets, err = strict(doc, m.secrets)
		case "v1 ServiceAccount":
			m.serviceAccounts, err = strict(doc, m.serviceAccounts)
		case "policy/v1 PodDisruptionBudget":
			m.pdbs, err = strict(doc, m.pdbs)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			m.hpas, err = strict(doc, m.hpas)
		case "networking.k8s.io/v1 NetworkPolicy":
			m.networkPolicies, err = strict(doc, m.networkPolicies)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.serviceMonitors, err = strict(doc, m.serviceMonitors)
		default:
			err = fmt.Errorf("unexpected object %s %s", head.APIVersion, head.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i, head.Kind, err)
		}
	}
	return m, nil
}

// strict decodes doc into a new T, refusing unknown fields, and appends it.
func strict[T any](doc string, list []*T) ([]*T, error) {
	v := new(T)
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		return nil, err
	}
	return append(list, v), nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// renderDecoded renders and decodes, failing the test on either error.
func renderDecoded(t *testing.T, valueFiles []string, sets ...string) *manifests {
	t.Helper()
	out, err := render(t, valueFiles, sets...)
	require.NoError(t, err)
	m, err := decode(out)
	require.NoError(t, err, "strict decode of the rendered chart")
	return m
}

// TestStrictDecodeRefusesUnknownFields is the decoder's own check: a field
// that the Kubernetes type does not have (a typo) must fail, or the render
// tests below would prove nothing.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	good := "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  ports:\n    - port: 80\n"
	_, err := decode([]byte(good))
	require.NoError(t, err)
	for name, doc := range map[string]string{
		"unknown field":   strings.Replace(good, "port: 80", "port: 80\n      targetPrt: 80", 1),
		"misplaced field": strings.Replace(good, "spec:", "spec:\n  containers: []", 1),
		"wrong type":      strings.Replace(good, "port: 80", "port: eighty", 1),
		"unknown kind":    strings.Replace(good, "kind: Service", "kind: Ingress", 1),
	} {
		_, err := decode([]byte(doc))
		require.Error(t, err, name)
	}
}

const ciValues = chartDir + "/ci/test-values.yaml"

// TestRenderEveryFeature renders the chart with every feature on (the CI
// values) and checks the objects hang together: selectors match the pods,
// every port, volume and secret a pod names exists.
func TestRenderEveryFeature(t *testing.T) {
	m := renderDecoded(t, []string{ciValues})
	require.Len(t, m.deployments, 1)
	require.Len(t, m.services, 2)
	require.Len(t, m.pdbs, 1)
	require.Len(t, m.hpas, 1)
	require.Len(t, m.networkPolicies, 1)
	require.Len(t, m.serviceMonitors, 1)
	require.Len(t, m.serviceAccounts, 1)
	d := m.deployments[0]
	require.Nil(t, d.Spec.Replicas, "with an HPA the Deployment leaves replicas to it")
	checkConsistent(t, m)

	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	require.Equal(t, "wfm:0.1.0", c.Image, "the Dockerfile's image, tagged with the chart's appVersion")
	require.Equal(t, corev1.URISchemeHTTPS, c.ReadinessProbe.HTTPGet.Scheme, "management TLS: probes speak HTTPS")
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "https", m.serviceMonitors[0].Spec.Endpoints[0].Scheme.String())
	require.Equal(t, "/metrics", m.serviceMonitors[0].Spec.Endpoints[0].Path)

	// Non-root, read-only root filesystem, no privilege.
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.Equal(t, int64(65532), *pod.SecurityContext.RunAsUser, "distroless nonroot")
	require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	require.False(t, *pod.AutomountServiceAccountToken)

	// Egress restricted: DNS, the database's network, webhooks.
	np := m.networkPolicies[0]
	require.Len(t, np.Spec.Egress, 3)
	require.Equal(t, "10.10.0.0/16", np.Spec.Egress[1].To[0].IPBlock.CIDR)
}

// checkConsistent checks references between the objects of one rendering.
func checkConsistent(t *testing.T, m *manifests) {
	t.Helper()
	d := m.deployments[0]
	pod := d.Spec.Template.Spec
	labels := d.Spec.Template.Labels
	for k, v := range d.Spec.Selector.MatchLabels {
		require.Equal(t, v, labels[k], "Deployment selector %s", k)
	}
	ports := map[string]bool{}
	for _, p := range pod.Containers[0].Ports {
		ports[p.Name] = true
	}
	for _, s := range m.services {
		for k, v := range s.Spec.Selector {
			require.Equal(t, v, labels[k], "Service %s selector %s", s.Name, k)
		}
		for _, p := range s.Spec.Ports {
			require.True(t, ports[p.TargetPort.StrVal], "Service %s targets port %q the container lacks", s.Name, p.TargetPort.StrVal)
		}
	}
	for _, p := range []*corev1.Probe{pod.Containers[0].StartupProbe, pod.Containers[0].LivenessProbe, pod.Containers[0].ReadinessProbe} {
		require.NotNil(t, p)
		require.True(t, ports[p.HTTPGet.Port.StrVal], "probe port %q", p.HTTPGet.Port.StrVal)
	}
	for _, pdb := range m.pdbs {
		for k, v := range pdb.Spec.Selector.MatchLabels {
			require.Equal(t, v, labels[k], "PDB selector %s", k)
		}
	}
	for _, np := range m.networkPolicies {
		for k, v := range np.Spec.PodSelector.MatchLabels {
			require.Equal(t, v, labels[k], "NetworkPolicy selector %s", k)
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				require.True(t, ports[p.Port.StrVal], "NetworkPolicy port %q", p.Port.StrVal)
			}
		}
	}
	for _, h := range m.hpas {
		require.Equal(t, d.Name, h.Spec.ScaleTargetRef.Name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range pod.Containers[0].VolumeMounts {
		_, ok := volumes[vm.Name]
		require.True(t, ok, "volume mount %s has no volume", vm.Name)
	}
	// A rendered secret that a pod names must hold the keys the pod reads.
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		if s := findSecret(m, v.Secret.SecretName); s != nil {
			for _, it := range v.Secret.Items {
				_, ok := s.StringData[it.Key]
				require.True(t, ok, "secret %s lacks key %s of volume %s", s.Name, it.Key, v.Name)
			}
		}
	}
}

func findSecret(m *manifests, name string) *corev1.Secret {
	for _, s := range m.secrets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// TestRenderRefusesMissingSecrets: a chart that renders must start, so
// every value a production server needs is required.
func TestRenderRefusesMissingSecrets(t *testing.T) {
	_, err := render(t, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), "database.url or database.existingSecret is required")
	for _, tc := range []struct{ unset, want string }{
		{"webhookKey.value=", "webhookKey.value or webhookKey.existingSecret is required"},
		{"deviceTLS.key=", "deviceTLS.existingSecret (kubernetes.io/tls) or deviceTLS.cert and deviceTLS.key are required"},
		{"deviceTLS.clientCA.bundle=", "deviceTLS.clientCA.existingSecret or deviceTLS.clientCA.bundle is required"},
		{"mgmtTLS.cert=", "mgmtTLS.enabled needs"},
		{"config.acceptClients=some", "config.acceptClients must be all or listed"},
	} {
		_, err := render(t, []string{ciValues}, tc.unset)
		require.Error(t, err, tc.unset)
		require.Contains(t, err.Error(), tc.want, tc.unset)
	}
}

var errNoFile = errors.New("no such file in the pod")

// podFile finds the secret and key behind a file path of the container:
// the volume mounted above it and the item projected at it.
func podFile(pod corev1.PodSpec, path string) (secret, key string, err error) {
	for _, vm := range pod.Containers[0].VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return v.Secret.SecretName, it.Key, nil
				}
			}
		}
	}
	return "", "", fmt.Errorf("%s: %w", path, errNoFile)
}
