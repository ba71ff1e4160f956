package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Docker is not available on the build machines, so docker-compose.yml and
// the Dockerfile are checked statically here: what the containers are told
// (environment, command lines, published ports, volumes) must be what the
// server and the simulator read, with the values they accept. The YAML is
// decoded strictly into the subset of the Compose format the file uses (a
// key this test does not know fails it); the Dockerfile is read line by line
// (FROM … AS, ENV, EXPOSE, VOLUME, COPY, ENTRYPOINT: no parser library is
// served here, and these instructions are all the file uses).

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Restart     string `yaml:"restart"`
	Healthcheck any    `yaml:"healthcheck"`
}

type composeBuild struct {
	Context string `yaml:"context"`
	Target  string `yaml:"target"`
}

// dockerStage is one stage of the Dockerfile.
type dockerStage struct {
	env        map[string]string
	expose     []string
	volumes    []string
	copies     [][]string // arguments of each COPY
	entrypoint []string
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f composeFile
	require.NoError(t, dec.Decode(&f), "docker-compose.yml")
	return f
}

// readDockerfile returns the Dockerfile's stages by name.
func readDockerfile(t *testing.T) map[string]*dockerStage {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	var logical string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" && logical == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			logical += cont + " "
			continue
		}
		line, logical = logical+line, ""
		instr, rest, _ := strings.Cut(line, " ")
		args := strings.Fields(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			require.Len(t, args, 3, "FROM %s: every stage is named (FROM image AS name)", rest)
			require.True(t, strings.EqualFold(args[1], "AS"), line)
			cur = &dockerStage{env: map[string]string{}}
			stages[args[2]] = cur
		case "ENV":
			for _, kv := range args {
				k, v, ok := strings.Cut(kv, "=")
				require.True(t, ok, "ENV %s: write key=value", kv)
				cur.env[k] = v
			}
		case "EXPOSE":
			cur.expose = append(cur.expose, args...)
		case "VOLUME":
			cur.volumes = append(cur.volumes, args...)
		case "COPY":
			cur.copies = append(cur.copies, args)
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(rest), &cur.entrypoint), "ENTRYPOINT in exec form: %s", line)
		case "WORKDIR", "RUN", "USER", "ARG":
		default:
			t.Fatalf("Dockerfile: instruction %s is not checked by this test; teach it", instr)
		}
	}
	return stages
}

// serviceEnv is what a container of s sees: the image's ENV, then the
// service's environment.
func serviceEnv(stage *dockerStage, s composeService) map[string]string {
	env := map[string]string{}
	for k, v := range stage.env {
		env[k] = v
	}
	for k, v := range s.Environment {
		env[k] = v
	}
	return env
}

// recordingEnv is a getenv over env that notes every name asked for.
func recordingEnv(env map[string]string, asked map[string]bool) func(string) string {
	return func(k string) string {
		asked[k] = true
		return env[k]
	}
}

// devicesimFlags are the flag names cmd/wfm-devicesim defines (read from its
// source: fs.String("name", …) and the like).
func devicesimFlags(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../wfm-devicesim/main.go", nil, 0)
	require.NoError(t, err)
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasPrefix(sel.Sel.Name, "String") && !strings.HasPrefix(sel.Sel.Name, "Int") && !strings.HasPrefix(sel.Sel.Name, "Uint") &&
			!strings.HasPrefix(sel.Sel.Name, "Bool") && !strings.HasPrefix(sel.Sel.Name, "Duration") && !strings.HasPrefix(sel.Sel.Name, "Float64") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
			return true
		}
		arg := call.Args[0]
		if strings.HasSuffix(sel.Sel.Name, "Var") && len(call.Args) > 1 {
			arg = call.Args[1]
		}
		if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			name, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			names = append(names, name)
		}
		return true
	})
	require.Contains(t, names, "server", "the simulator's flags were read")
	return names
}

// flagArgs splits a command line of single-dash flags into name -> value
// (every flag of the compose file takes a value).
func flagArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	require.Zero(t, len(args)%2, "flags and values in pairs: %q", args)
	m := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		name, ok := strings.CutPrefix(args[i], "-")
		require.True(t, ok, "%q is not a flag", args[i])
		m[name] = args[i+1]
	}
	return m
}

func port(t *testing.T, addr string) (host, p string) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	return host, p
}

// TestComposeAgreesWithServer checks docker-compose.yml and the Dockerfile
// against the server's flags and defaults (see the comment at the top).
func TestComposeAgreesWithServer(t *testing.T) {
	f := readCompose(t)
	stages := readDockerfile(t)
	require.Contains(t, f.Services, "wfm")
	srv := f.Services["wfm"]
	require.NotNil(t, srv.Build)
	stage := stages[srv.Build.Target]
	require.NotNil(t, stage, "the wfm service builds Dockerfile stage %q", srv.Build.Target)

	// Every variable the image and the service set is one the server reads,
	// and the server accepts the values.
	env := serviceEnv(stage, srv)
	asked := map[string]bool{}
	c, err := parseConfig(srv.Command, recordingEnv(env, asked), io.Discard)
	require.NoError(t, err, "the server accepts the wfm service's environment and command")
	for k := range env {
		assert.True(t, asked[k], "%s is set for the wfm service but the server does not read it", k)
	}
	for k := range stage.env {
		assert.True(t, asked[k], "the Dockerfile sets %s but the server does not read it", k)
	}

	// Listeners: every interface of the container; the device port
	// published on every host interface, the management port on the
	// host's loopback only while it is plain HTTP.
	mhost, mport := port(t, c.listen)
	dhost, dport := port(t, c.deviceListen)
	assert.Contains(t, []string{"", "0.0.0.0", "::"}, mhost, "the management listener listens on the container's interfaces (the port is published)")
	assert.Contains(t, []string{"", "0.0.0.0", "::"}, dhost, "the device listener listens on the container's interfaces")
	published := map[string]string{} // container port -> host address:port
	for _, p := range srv.Ports {
		parts := strings.Split(p, ":")
		require.Contains(t, []int{2, 3}, len(parts), "port %q: [host-ip:]host-port:container-port", p)
		cport := parts[len(parts)-1]
		hostIP := ""
		if len(parts) == 3 {
			hostIP = parts[0]
		}
		published[cport] = net.JoinHostPort(hostIP, parts[len(parts)-2])
		assert.Contains(t, []string{mport, dport}, cport, "published port %s is a listener's port", cport)
	}
	mpub, ok := published[mport]
	require.True(t, ok, "the management port %s is published", mport)
	if c.mgmtTLSCert == "" && !c.mgmtTLSDev {
		h, _ := port(t, mpub)
		assert.Equal(t, "127.0.0.1", h, "plain-HTTP management is published on the host's loopback only")
	}
	dpub, ok := published[dport]
	require.True(t, ok, "the device port %s is published", dport)
	h, hp := port(t, dpub)
	assert.Empty(t, h, "the device port is published on every host interface")
	assert.Equal(t, "8443", hp)
	assert.ElementsMatch(t, []string{mport, dport}, stage.expose, "EXPOSE lists the listeners' ports")
	_, defPort := port(t, "127.0.0.1:8443") // the server's default device port
	assert.Equal(t, defPort, dport)

	// The data folder is a named volume (the development CA and the admin
	// token survive re-creation), writable by the image's user.
	assert.Contains(t, srv.Volumes, "wfm-data:"+c.dataDir)
	assert.Contains(t, f.Volumes, "wfm-data")
	assert.Contains(t, stage.volumes, c.dataDir)
	assert.True(t, slices.ContainsFunc(stage.copies, func(args []string) bool {
		return slices.Contains(args, "--chown=65532:65532") && args[len(args)-1] == c.dataDir
	}), "the image creates %s owned by nonroot (65532), so that a fresh volume is writable", c.dataDir)

	// The database: the postgres service, with its credentials.
	require.NotEmpty(t, c.databaseURL)
	u, err := url.Parse(c.databaseURL)
	require.NoError(t, err)
	pgEnv := f.Services[u.Hostname()].Environment
	require.NotNil(t, pgEnv, "DATABASE_URL names a service of the file")
	pw, _ := u.User.Password()
	assert.Equal(t, pgEnv["POSTGRES_USER"], u.User.Username())
	assert.Equal(t, pgEnv["POSTGRES_PASSWORD"], pw)
	assert.Equal(t, pgEnv["POSTGRES_DB"], strings.TrimPrefix(u.Path, "/"))
	assert.Equal(t, "service_healthy", srv.DependsOn[u.Hostname()].Condition)

	// An admin token the user can read: created in the data volume.
	assert.True(t, c.adminTokenNew && c.adminToken == "" && c.adminTokenFile == "",
		"with DATABASE_URL the server creates <data-dir>/admin-token only with -admin-token-create")

	// The server certificate carries the name other containers use.
	assert.Contains(t, c.deviceCertHosts, "wfm")
	assert.Empty(t, c.tlsCert, "the development PKI")

	// The pki job issues the simulator's certificate with the server's
	// own command (run here against a temporary folder).
	pki := f.Services["pki"]
	require.NotNil(t, pki.Build)
	assert.Equal(t, srv.Build.Target, pki.Build.Target)
	assert.Contains(t, pki.Volumes, "wfm-data:"+c.dataDir)
	require.Equal(t, "issue-client-cert", pki.Command[0])
	pkiArgs := flagArgs(t, pki.Command[1:])
	tmp := t.TempDir()
	var out strings.Builder
	pkiEnv := serviceEnv(stage, pki)
	// Its -out folder (a path in the container) goes to the temporary one.
	pkiCmd := slices.Clone(pki.Command)
	outDir := filepath.Join(tmp, "out")
	for i := range pkiCmd {
		if pkiCmd[i] == "-out" && i+1 < len(pkiCmd) {
			pkiCmd[i+1] = outDir
		}
	}
	require.NoError(t, run(t.Context(), append(pkiCmd, "-data-dir", tmp), func(k string) string { return pkiEnv[k] }, &out, io.Discard))
	assert.Equal(t, "service_completed_successfully", srv.DependsOn["pki"].Condition, "the server starts after the CA exists (one creator)")
	pkiDataDir := pkiEnv["WFM_DATA_DIR"]
	assert.Equal(t, c.dataDir, pkiDataDir, "the pki job writes to the server's data folder")

	// The simulator: its flags exist, it trusts the development CA, uses
	// the issued certificate and reaches the server by a certified name.
	sim := f.Services["devicesim"]
	require.NotNil(t, sim.Build)
	require.NotNil(t, stages[sim.Build.Target], "the devicesim service builds Dockerfile stage %q", sim.Build.Target)
	assert.Equal(t, []string{"/usr/local/bin/wfm-devicesim"}, stages[sim.Build.Target].entrypoint)
	known := devicesimFlags(t)
	simArgs := flagArgs(t, sim.Command)
	for name := range simArgs {
		assert.Contains(t, known, name, "wfm-devicesim has no flag -%s", name)
	}
	// The simulator reads the certificate, its key and the CA certificate
	// from the folder the pki job wrote them to (-out), a volume of their
	// own mounted at another path: never the data volume, which holds the
	// CA's key and the admin token.
	client, pkiOut := pkiArgs["client-id"], pkiArgs["out"]
	require.NotEmpty(t, pkiOut, "the pki job writes the simulator's files apart from the data folder")
	var shared, simDir string
	for _, v := range pki.Volumes {
		if name, path, ok := strings.Cut(v, ":"); ok && path == pkiOut {
			shared = name
		}
	}
	require.NotEmpty(t, shared, "the pki job's -out folder is a volume")
	for _, v := range sim.Volumes {
		name, rest, _ := strings.Cut(v, ":")
		assert.NotEqual(t, "wfm-data", name, "the simulator must not mount the data volume")
		if name == shared {
			path, mode, _ := strings.Cut(rest, ":")
			simDir = path
			assert.Equal(t, "ro", mode, "the simulator mounts its certificates read-only")
		}
	}
	require.NotEmpty(t, simDir, "the simulator mounts the pki job's volume")
	assert.Equal(t, filepath.Join(simDir, "ca.pem"), simArgs["ca"])
	assert.Equal(t, filepath.Join(simDir, client+".pem"), simArgs["cert"])
	assert.Equal(t, filepath.Join(simDir, client+"-key.pem"), simArgs["key"])
	assert.Contains(t, f.Volumes, shared)
	for _, name := range []string{"ca.pem", client + ".pem", client + "-key.pem"} {
		assert.FileExists(t, filepath.Join(outDir, name), "issue-client-cert wrote where the simulator reads")
	}
	su, err := url.Parse(simArgs["server"])
	require.NoError(t, err)
	assert.Equal(t, "https", su.Scheme)
	assert.Equal(t, dport, su.Port())
	assert.Contains(t, c.deviceCertHosts, su.Hostname(), "the simulator's server name is on the server certificate")
	assert.Contains(t, f.Services, su.Hostname(), "the simulator's server name is the server's service")
	assert.Equal(t, "service_completed_successfully", sim.DependsOn["pki"].Condition)
	assert.Contains(t, sim.DependsOn, "wfm")

	// The server's entry point is the binary the image holds.
	assert.Equal(t, []string{"/usr/local/bin/wfm"}, stage.entrypoint)
	for name, s := range f.Services {
		for dep := range s.DependsOn {
			assert.Contains(t, f.Services, dep, "%s depends on a service of the file", name)
		}
	}
}

// TestPrintAdminToken: the command the README gives for reading the token
// in the container prints the file the server created.
func TestPrintAdminToken(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "admin-token"), []byte("s3cret-token-value\n"), 0o600))
	var out strings.Builder
	require.NoError(t, run(t.Context(), []string{"print-admin-token"}, func(k string) string {
		return map[string]string{"WFM_DATA_DIR": dir}[k]
	}, &out, io.Discard))
	assert.Equal(t, "s3cret-token-value\n", out.String())
	err := run(t.Context(), []string{"print-admin-token", "-data-dir", t.TempDir()}, func(string) string { return "" }, &out, io.Discard)
	assert.ErrorContains(t, err, "-admin-token-create")

	// WFM_ADMIN_TOKEN is the token the server uses (it replaces the stored
	// one): that is the one printed.
	out.Reset()
	require.NoError(t, run(t.Context(), []string{"print-admin-token"}, func(k string) string {
		return map[string]string{"WFM_DATA_DIR": dir, "WFM_ADMIN_TOKEN": "from-the-environment-0123"}[k]
	}, &out, io.Discard))
	assert.Equal(t, "from-the-environment-0123\n", out.String())

	// A file that holds no token is an error, not an empty line.
	for _, content := range []string{"", "short\n", "two\nlines-of-a-token-file\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "admin-token"), []byte(content), 0o600))
		err := run(t.Context(), []string{"print-admin-token"}, func(k string) string { return map[string]string{"WFM_DATA_DIR": dir}[k] }, &out, io.Discard)
		assert.ErrorContains(t, err, "does not hold an admin token", "%q", content)
	}
}
