package charttest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// serverMain is the server's configuration code: its flag and environment
// names are the settings the chart may use.
const serverMain = "../../../cmd/wfm/main.go"

// serverSettings reads the flag names and environment variable names that
// wfm's parseConfig defines, from its source: the first string argument of
// every fs.<Type>Var call (a flag) and of every getenv or env call (a
// variable).
func serverSettings(t *testing.T) (flags, envs map[string]bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), serverMain, nil, 0)
	require.NoError(t, err)
	flags, envs = map[string]bool{}, map[string]bool{}
	var parse *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "parseConfig" {
			parse = fd
		}
	}
	require.NotNil(t, parse, "parseConfig not found in %s", serverMain)
	ast.Inspect(parse.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		first := func(i int) string {
			if i >= len(call.Args) {
				return ""
			}
			lit, ok := call.Args[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return ""
			}
			s, _ := strconv.Unquote(lit.Value)
			return s
		}
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && x.Name == "fs" && strings.HasSuffix(fn.Sel.Name, "Var") {
				if name := first(1); name != "" {
					flags[name] = true
				}
			}
		case *ast.Ident:
			if fn.Name == "getenv" || fn.Name == "env" {
				if name := first(0); name != "" {
					envs[name] = true
				}
			}
		}
		return true
	})
	// The parser must have found the well-known ones, or it found nothing.
	require.True(t, flags["event-retention"] && flags["report-retention"], "flags read from %s: %v", serverMain, flags)
	require.True(t, envs["DATABASE_URL"] && envs["WFM_EVENT_RETENTION"], "variables read from %s: %v", serverMain, envs)
	return flags, envs
}

var argPattern = regexp.MustCompile(`^-([a-z0-9-]+)=(.*)$`)

// settings returns the container's settings, environment variables and
// flags, checking that each is one wfm has.
func settings(t *testing.T, c corev1.Container) (env map[string]corev1.EnvVar, args map[string]string) {
	t.Helper()
	flags, envs := serverSettings(t)
	env, args = map[string]corev1.EnvVar{}, map[string]string{}
	for _, e := range c.Env {
		require.True(t, envs[e.Name], "the chart sets %s, which wfm does not read", e.Name)
		_, dup := env[e.Name]
		require.False(t, dup, "%s set twice", e.Name)
		env[e.Name] = e
	}
	for _, a := range c.Args {
		m := argPattern.FindStringSubmatch(a)
		require.NotNil(t, m, "argument %q is not -flag=value", a)
		require.True(t, flags[m[1]], "the chart passes -%s, which wfm does not define", m[1])
		args[m[1]] = m[2]
	}
	return env, args
}

// configCases are the chart's config values, each set to a value other than
// its default, and the setting of wfm that must carry it: an environment
// variable, or a flag ("-name").
var configCases = []struct{ value, set, setting, want string }{
	{"trustDomain", "fleet.example", "WFM_TRUST_DOMAIN", "fleet.example"},
	{"wfmId", "eu1", "WFM_ID", "eu1"},
	{"acceptClients", "all", "WFM_ACCEPT_CLIENTS", "all"},
	{"logLevel", "debug", "WFM_LOG_LEVEL", "debug"},
	{"logFormat", "text", "WFM_LOG_FORMAT", "text"},
	{"eventRetention", "48h", "WFM_EVENT_RETENTION", "48h"},
	{"eventStreams", "500", "WFM_EVENT_STREAMS", "500"},
	{"bundleRetention", "24h", "WFM_BUNDLE_RETENTION", "24h"},
	{"manifestStaleBound", "90s", "WFM_MANIFEST_STALE_BOUND", "90s"},
	{"reportRetention", "7", "WFM_REPORT_RETENTION", "7"},
	{"mgmtRate", "10", "WFM_MGMT_RATE", "10"},
	{"mgmtBurst", "20", "WFM_MGMT_BURST", "20"},
	{"deviceRate", "5", "WFM_DEVICE_RATE", "5"},
	{"deviceBurst", "9", "WFM_DEVICE_BURST", "9"},
	{"trustedProxies", "10.1.0.0/16", "WFM_TRUSTED_PROXIES", "10.1.0.0/16"},
	{"forwardedHeader", "forwarded", "WFM_FORWARDED_HEADER", "forwarded"},
	{"deviceTLS12", "true", "WFM_DEVICE_TLS12", "true"},
	{"allowRollbackOverride", "false", "WFM_ALLOW_ROLLBACK_OVERRIDE", "false"},
	{"shutdownTimeoutSeconds", "30", "WFM_SHUTDOWN_TIMEOUT", "30s"},
	{"webhooks.allowHTTP", "true", "WFM_WEBHOOK_ALLOW_HTTP", "true"},
	{"webhooks.allowCIDR", "10.30.0.0/16", "WFM_WEBHOOK_ALLOW_CIDR", "10.30.0.0/16"},
	{"webhooks.timeout", "5s", "WFM_WEBHOOK_TIMEOUT", "5s"},
	{"webhooks.disableAfter", "7", "WFM_WEBHOOK_DISABLE_AFTER", "7"},
	{"webhooks.deliveryRetention", "24h", "WFM_WEBHOOK_DELIVERY_RETENTION", "24h"},
	{"webhooks.workers", "3", "WFM_WEBHOOK_WORKERS", "3"},
}

// TestConfigValuesReachTheServer sets every value under config to a
// non-default value and checks that it reaches the container as the wfm
// setting that means it, and that every environment variable and flag the
// chart passes is one wfm defines.
func TestConfigValuesReachTheServer(t *testing.T) {
	// Every config value of values.yaml has its case: a new value must be
	// wired and tested.
	var values struct {
		Config map[string]any `json:"config"`
	}
	b, err := os.ReadFile(chartDir + "/values.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &values))
	var have, tested []string
	for _, k := range leaves("", values.Config) {
		have = append(have, k)
	}
	sets := []string{}
	for _, c := range configCases {
		tested = append(tested, c.value)
		sets = append(sets, "config."+c.value+"="+c.set)
	}
	sort.Strings(have)
	sort.Strings(tested)
	require.Equal(t, have, tested, "config values of values.yaml vs the cases of this test")

	m := renderDecoded(t, []string{ciValues}, sets...)
	env, args := settings(t, m.deployments[0].Spec.Template.Spec.Containers[0])
	for _, c := range configCases {
		if name, ok := strings.CutPrefix(c.setting, "-"); ok {
			require.Equal(t, c.want, args[name], "config.%s=%s as -%s", c.value, c.set, name)
			continue
		}
		require.Equal(t, c.want, env[c.setting].Value, "config.%s=%s as %s", c.value, c.set, c.setting)
	}
	require.Equal(t, int64(30+5+5), *m.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds,
		"grace period: shutdown timeout + preStop sleep + 5 s")
}

// leaves lists the dotted paths of the scalar values (and empty maps) of a
// YAML map.
func leaves(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, leaves(prefix+k+".", sub)...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}

// TestSecretsReachTheServer follows each file and secret setting from the
// container to the Secret the chart rendered from the values: the database
// URL, the admin token, the webhook key, the device listener's certificate,
// key and client trust bundle, the management TLS certificate and key.
func TestSecretsReachTheServer(t *testing.T) {
	var v struct {
		Database   struct{ URL string }       `json:"database"`
		AdminToken struct{ Value string }     `json:"adminToken"`
		WebhookKey struct{ Value string }     `json:"webhookKey"`
		DeviceTLS  struct{ Cert, Key string } `json:"deviceTLS"`
		MgmtTLS    struct{ Cert, Key string } `json:"mgmtTLS"`
	}
	var raw map[string]any
	b, err := os.ReadFile(ciValues)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &v))
	require.NoError(t, yaml.Unmarshal(b, &raw))
	bundle := raw["deviceTLS"].(map[string]any)["clientCA"].(map[string]any)["bundle"].(string)

	m := renderDecoded(t, []string{ciValues})
	pod := m.deployments[0].Spec.Template.Spec
	env, _ := settings(t, pod.Containers[0])

	ref := env["DATABASE_URL"].ValueFrom.SecretKeyRef
	require.NotNil(t, ref)
	require.Equal(t, v.Database.URL, findSecret(m, ref.Name).StringData[ref.Key])

	for name, want := range map[string]string{
		"WFM_ADMIN_TOKEN_FILE": v.AdminToken.Value,
		"WFM_WEBHOOK_KEY_FILE": v.WebhookKey.Value,
		"WFM_TLS_CERT":         v.DeviceTLS.Cert,
		"WFM_TLS_KEY":          v.DeviceTLS.Key,
		"WFM_CLIENT_CA":        bundle,
		"WFM_MGMT_TLS_CERT":    v.MgmtTLS.Cert,
		"WFM_MGMT_TLS_KEY":     v.MgmtTLS.Key,
	} {
		secret, key, err := podFile(pod, env[name].Value)
		require.NoError(t, err, name)
		s := findSecret(m, secret)
		require.NotNil(t, s, "%s: secret %s not rendered", name, secret)
		require.Equal(t, want, s.StringData[key], "%s reads %s/%s", name, secret, key)
	}

	// The listeners are on the container's ports, on every interface.
	require.Equal(t, ":8080", env["WFM_LISTEN"].Value)
	require.Equal(t, ":8443", env["WFM_DEVICE_LISTEN"].Value)
	var ports []int32
	for _, p := range pod.Containers[0].Ports {
		ports = append(ports, p.ContainerPort)
	}
	require.Equal(t, []int32{8080, 8443}, ports)
	// The data folder is writable although the root filesystem is not.
	mounted := false
	for _, vm := range pod.Containers[0].VolumeMounts {
		mounted = mounted || vm.MountPath == env["WFM_DATA_DIR"].Value
	}
	require.True(t, mounted, "WFM_DATA_DIR %s is not a mounted volume", env["WFM_DATA_DIR"].Value)
}

// TestExistingSecrets: with every secret given by name, the chart renders
// none of its own and the pod reads the named secrets and keys.
func TestExistingSecrets(t *testing.T) {
	m := renderDecoded(t, nil,
		"database.existingSecret=db", "database.existingSecretKey=url",
		"adminToken.existingSecret=admin", "adminToken.existingSecretKey=token",
		"webhookKey.existingSecret=hooks", "webhookKey.existingSecretKey=key32",
		"deviceTLS.existingSecret=device-cert",
		"deviceTLS.clientCA.existingSecret=device-ca", "deviceTLS.clientCA.existingSecretKey=bundle.pem",
		"mgmtTLS.enabled=true", "mgmtTLS.existingSecret=mgmt-cert",
		"networkPolicy.enabled=false", "podDisruptionBudget.enabled=false")
	require.Empty(t, m.secrets, "no secret rendered when every one exists")
	require.Empty(t, m.networkPolicies)
	require.Empty(t, m.pdbs)
	require.Empty(t, m.hpas)
	require.Empty(t, m.serviceMonitors)
	require.Equal(t, int32(3), *m.deployments[0].Spec.Replicas)
	checkConsistent(t, m)
	pod := m.deployments[0].Spec.Template.Spec
	env, _ := settings(t, pod.Containers[0])
	ref := env["DATABASE_URL"].ValueFrom.SecretKeyRef
	require.Equal(t, []string{"db", "url"}, []string{ref.Name, ref.Key})
	for name, want := range map[string][2]string{
		"WFM_ADMIN_TOKEN_FILE": {"admin", "token"},
		"WFM_WEBHOOK_KEY_FILE": {"hooks", "key32"},
		"WFM_TLS_CERT":         {"device-cert", "tls.crt"},
		"WFM_TLS_KEY":          {"device-cert", "tls.key"},
		"WFM_CLIENT_CA":        {"device-ca", "bundle.pem"},
		"WFM_MGMT_TLS_CERT":    {"mgmt-cert", "tls.crt"},
		"WFM_MGMT_TLS_KEY":     {"mgmt-cert", "tls.key"},
	} {
		secret, key, err := podFile(pod, env[name].Value)
		require.NoError(t, err, name)
		require.Equal(t, want, [2]string{secret, key}, name)
	}
}

// TestWithoutOptionalSettings: no admin token and plain HTTP management
// leave their settings out (wfm then warns at start), and the probes speak
// HTTP.
func TestWithoutOptionalSettings(t *testing.T) {
	m := renderDecoded(t, []string{ciValues}, "adminToken.value=", "mgmtTLS.enabled=false")
	c := m.deployments[0].Spec.Template.Spec.Containers[0]
	env, _ := settings(t, c)
	for _, name := range []string{"WFM_ADMIN_TOKEN_FILE", "WFM_MGMT_TLS_CERT", "WFM_MGMT_TLS_KEY"} {
		_, ok := env[name]
		require.False(t, ok, name)
	}
	require.Equal(t, corev1.URISchemeHTTP, c.LivenessProbe.HTTPGet.Scheme)
	require.False(t, slices.ContainsFunc(m.secrets, func(s *corev1.Secret) bool { return strings.HasSuffix(s.Name, "mgmt-tls") }))
}

// TestREADMEDocumentsEveryValue: every value of values.yaml has a row in
// the chart's README, or one of the maps above it has (a map passed to the
// pod as a whole, such as resources).
func TestREADMEDocumentsEveryValue(t *testing.T) {
	var values map[string]any
	b, err := os.ReadFile(chartDir + "/values.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &values))
	readme, err := os.ReadFile(chartDir + "/README.md")
	require.NoError(t, err)
	for _, k := range leaves("", values) {
		documented := false
		for p := k; p != "" && !documented; {
			documented = strings.Contains(string(readme), "| `"+p+"` |")
			i := strings.LastIndex(p, ".")
			if i < 0 {
				break
			}
			p = p[:i]
		}
		require.True(t, documented, "value %s is not documented in the chart's README", k)
	}
}
