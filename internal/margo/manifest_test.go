package margo

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

var updateManifestGolden = flag.Bool("update-manifest-golden", false, "rewrite testdata/manifest-*.golden.json")

const (
	manifestExample = "testdata/manifest-example-DesiredStateManifest-001.json"
	manifestGolden  = "testdata/manifest-two.golden.json"
)

// manifestEntries are three deployments with distinct documents, in an
// unsorted order.
func manifestEntries() []ManifestEntry {
	return []ManifestEntry{
		{DeploymentID: "c0000000-0000-4000-8000-000000000003", YAML: []byte("id: c0000000-0000-4000-8000-000000000003\n")},
		{DeploymentID: "a3e2f5dc-912e-494f-8395-52cf3769bc06", YAML: []byte("id: a3e2f5dc-912e-494f-8395-52cf3769bc06\nspec: {}\n")},
		{DeploymentID: "b0000000-0000-4000-8000-000000000002", YAML: []byte("id: b0000000-0000-4000-8000-000000000002\nmetadata: x\n")},
	}
}

func TestDigestAndETag(t *testing.T) {
	// sha256("") and sha256("abc"), from FIPS 180-2.
	require.Equal(t, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Digest(nil))
	require.Equal(t, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", Digest([]byte("abc")))
	require.Equal(t, `"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`, ETag([]byte("abc")))
	require.True(t, ValidDigest(Digest([]byte("x"))))
	for _, s := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "sha512:" + strings.Repeat("a", 64),
		"sha256:" + strings.Repeat("a", 63), "sha256:" + strings.Repeat("a", 65), "sha256:" + strings.Repeat("a", 64) + "\n"} {
		require.False(t, ValidDigest(s), "ValidDigest(%q)", s)
	}
	require.Equal(t, "/api/v1/deployments/d/sha256:x", DeploymentURL("d", "sha256:x"))
	require.Equal(t, "/api/v1/bundles/sha256:x", BundleURL("sha256:x"))
}

// openBundle reads a bundle back with the standard library and checks every
// header is the deterministic one.
func openBundle(t *testing.T, b []byte) []BundleFile {
	t.Helper()
	require.True(t, len(b) > 10 && b[0] == 0x1f && b[1] == 0x8b, "not gzip")
	require.Equal(t, []byte{0, 0, 0, 0}, b[4:8], "gzip MTIME must be 0")
	require.Equal(t, byte(255), b[9], "gzip OS must be 255 (unknown)")
	require.Equal(t, byte(0), b[3]&0x08, "gzip FNAME must not be set")
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	require.Empty(t, zr.Name)
	require.Empty(t, zr.Comment)
	require.True(t, zr.ModTime.IsZero())
	tr := tar.NewReader(zr)
	var files []BundleFile
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, byte(tar.TypeReg), h.Typeflag, "%s: type", h.Name)
		require.Equal(t, int64(0o644), h.Mode, "%s: mode", h.Name)
		require.Zero(t, h.Uid, "%s: uid", h.Name)
		require.Zero(t, h.Gid, "%s: gid", h.Name)
		require.Empty(t, h.Uname, "%s: uname", h.Name)
		require.Empty(t, h.Gname, "%s: gname", h.Name)
		require.Equal(t, int64(0), h.ModTime.Unix(), "%s: mtime", h.Name)
		require.Equal(t, tar.FormatUSTAR, h.Format, "%s: format", h.Name)
		require.NotContains(t, h.Name, "/", "files are at the archive root")
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		files = append(files, BundleFile{Name: h.Name, Data: data})
	}
	require.NoError(t, zr.Close())
	return files
}

func TestBuildBundle(t *testing.T) {
	in := []BundleFile{
		{Name: "b.yaml", Data: []byte("b\n")},
		{Name: "a.yaml", Data: []byte("a: 1\n")},
		{Name: "c.yaml", Data: bytes.Repeat([]byte("long line\n"), 1000)},
		{Name: "empty.yaml", Data: nil},
	}
	orig := slices.Clone(in)
	b, err := BuildBundle(in)
	require.NoError(t, err)
	require.Equal(t, orig, in, "BuildBundle must not reorder the caller's slice")

	got := openBundle(t, b)
	want := slices.Clone(in)
	slices.SortFunc(want, func(x, y BundleFile) int { return strings.Compare(x.Name, y.Name) })
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].Name, got[i].Name)
		require.True(t, bytes.Equal(want[i].Data, got[i].Data), "%s: contents differ", want[i].Name)
	}

	rng := rand.New(rand.NewPCG(3, 5))
	for range 50 {
		shuffled := slices.Clone(in)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again, err := BuildBundle(shuffled)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, again), "BuildBundle depends on input order")
	}
}

func TestBuildBundleErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files []BundleFile
		typ   string
	}{
		{"nil", nil, ProblemEmptyBundle},
		{"empty", []BundleFile{}, ProblemEmptyBundle},
		{"duplicate", []BundleFile{{Name: "a.yaml"}, {Name: "b.yaml"}, {Name: "a.yaml"}}, ProblemInvalidBundle},
		{"slash", []BundleFile{{Name: "dir/a.yaml"}}, ProblemInvalidBundle},
		{"dotdot", []BundleFile{{Name: ".."}}, ProblemInvalidBundle},
		{"hidden", []BundleFile{{Name: ".a.yaml"}}, ProblemInvalidBundle},
		{"empty name", []BundleFile{{Name: ""}}, ProblemInvalidBundle},
		{"too long", []BundleFile{{Name: strings.Repeat("a", 101)}}, ProblemInvalidBundle},
		{"space", []BundleFile{{Name: "a b.yaml"}}, ProblemInvalidBundle},
	} {
		b, err := BuildBundle(tt.files)
		require.Nil(t, b, tt.name)
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%s: %v", tt.name, err)
		require.Equal(t, tt.typ, lifecycle.ErrorType(err), tt.name)
	}
	b, err := BuildBundle([]BundleFile{{Name: strings.Repeat("a", 100)}})
	require.NoError(t, err, "a 100-byte name fits USTAR")
	require.Equal(t, strings.Repeat("a", 100), openBundle(t, b)[0].Name)
}

// manifestJSONDoc is the manifest as a test reads it back.
type manifestJSONDoc struct {
	ManifestVersion json.Number `json:"manifestVersion"`
	Bundle          *struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		SizeBytes int    `json:"sizeBytes"`
		URL       string `json:"url"`
	} `json:"bundle"`
	Deployments []struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		SizeBytes    int    `json:"sizeBytes"`
		URL          string `json:"url"`
	} `json:"deployments"`
}

func decodeManifest(t *testing.T, b []byte) manifestJSONDoc {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var m manifestJSONDoc
	require.NoError(t, dec.Decode(&m))
	return m
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestRenderManifest(t *testing.T) {
	entries := manifestEntries()
	js, bundle, err := RenderManifest(StateManifest{Version: 42, Deployments: entries})
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(js, []byte("}\n")) && !bytes.HasSuffix(js, []byte("\n\n")), "exactly one trailing newline")

	m := decodeManifest(t, js)
	require.Equal(t, json.Number("42"), m.ManifestVersion)

	// Deployments: sorted, digests and sizes over the exact bytes.
	byID := map[string][]byte{}
	for _, e := range entries {
		byID[e.DeploymentID] = e.YAML
	}
	var ids []string
	for _, d := range m.Deployments {
		ids = append(ids, d.DeploymentID)
		y := byID[d.DeploymentID]
		require.Equal(t, "sha256:"+sha256Hex(y), d.Digest)
		require.Equal(t, len(y), d.SizeBytes)
		require.Equal(t, "/api/v1/deployments/"+d.DeploymentID+"/"+d.Digest, d.URL)
		require.True(t, ValidDigest(d.Digest))
	}
	require.True(t, slices.IsSorted(ids), "deployments sorted by id: %v", ids)
	require.Len(t, ids, len(entries))

	// Bundle: named by its digest, holding exactly the listed documents.
	require.NotNil(t, m.Bundle)
	require.Equal(t, BundleMediaType, m.Bundle.MediaType)
	require.Equal(t, "sha256:"+sha256Hex(bundle), m.Bundle.Digest)
	require.Equal(t, len(bundle), m.Bundle.SizeBytes)
	require.Equal(t, "/api/v1/bundles/"+m.Bundle.Digest, m.Bundle.URL)
	files := openBundle(t, bundle)
	require.Len(t, files, len(entries))
	for i, f := range files {
		require.Equal(t, ids[i]+".yaml", f.Name)
		require.True(t, bytes.Equal(byID[ids[i]], f.Data), "%s: bundle bytes differ", f.Name)
	}

	// Determinism across input orders.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		shuffled := slices.Clone(entries)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		js2, bundle2, err := RenderManifest(StateManifest{Version: 42, Deployments: shuffled})
		require.NoError(t, err)
		require.True(t, bytes.Equal(js, js2), "manifest depends on input order")
		require.True(t, bytes.Equal(bundle, bundle2), "bundle depends on input order")
	}
	require.Equal(t, manifestEntries(), entries, "RenderManifest must not reorder the caller's slice")

	// A changed document changes its digest and the bundle's, nothing else.
	changed := slices.Clone(entries)
	changed[0].YAML = append([]byte(nil), "id: c0000000-0000-4000-8000-000000000003\nspec: changed\n"...)
	js3, bundle3, err := RenderManifest(StateManifest{Version: 43, Deployments: changed})
	require.NoError(t, err)
	m3 := decodeManifest(t, js3)
	require.NotEqual(t, m.Bundle.Digest, m3.Bundle.Digest)
	require.Equal(t, Digest(bundle3), m3.Bundle.Digest)
	require.Equal(t, m.Deployments[0], m3.Deployments[0])
	require.NotEqual(t, m.Deployments[2].Digest, m3.Deployments[2].Digest)
}

func TestRenderManifestEmpty(t *testing.T) {
	js, bundle, err := RenderManifest(StateManifest{Version: 1})
	require.NoError(t, err)
	require.Nil(t, bundle)
	require.Equal(t, "{\n  \"manifestVersion\": 1,\n  \"bundle\": null,\n  \"deployments\": []\n}\n", string(js))
	js2, _, err := RenderManifest(StateManifest{Version: 1, Deployments: []ManifestEntry{}})
	require.NoError(t, err)
	require.Equal(t, js, js2)
}

func TestRenderManifestVersionExact(t *testing.T) {
	for _, v := range []uint64{1, 1_000_000, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MaxUint64} {
		js, _, err := RenderManifest(StateManifest{Version: v, Deployments: manifestEntries()[:1]})
		require.NoError(t, err)
		want := fmt.Sprintf("\"manifestVersion\": %d,\n", v)
		require.Contains(t, string(js), want)
		require.Equal(t, json.Number(fmt.Sprint(v)), decodeManifest(t, js).ManifestVersion)
	}
	js, _, err := RenderManifest(StateManifest{Version: math.MaxUint64})
	require.NoError(t, err)
	require.Contains(t, string(js), `"manifestVersion": 18446744073709551615,`)
}

func TestRenderManifestErrors(t *testing.T) {
	good := manifestEntries()
	for _, tt := range []struct {
		name string
		m    StateManifest
	}{
		{"version 0", StateManifest{Version: 0}},
		{"duplicate", StateManifest{Version: 1, Deployments: append(slices.Clone(good), good[1])}},
		{"uppercase id", StateManifest{Version: 1, Deployments: []ManifestEntry{{DeploymentID: strings.ToUpper(good[0].DeploymentID), YAML: good[0].YAML}}}},
		{"path id", StateManifest{Version: 1, Deployments: []ManifestEntry{{DeploymentID: "../x", YAML: good[0].YAML}}}},
		{"empty yaml", StateManifest{Version: 1, Deployments: []ManifestEntry{{DeploymentID: good[0].DeploymentID}}}},
	} {
		js, bundle, err := RenderManifest(tt.m)
		require.Nil(t, js, tt.name)
		require.Nil(t, bundle, tt.name)
		var e *lifecycle.Error
		require.True(t, errors.As(err, &e), "%s: %v", tt.name, err)
		require.Equal(t, lifecycle.EINVALID, e.Code, tt.name)
		require.Equal(t, ProblemInvalidManifest, e.Type, tt.name)
	}
}

// jsonShape returns, for a JSON document, every object's member names in
// document order by path, and the JSON type of every scalar by path.
func jsonShape(t *testing.T, b []byte) (members map[string][]string, types map[string]string) {
	t.Helper()
	members, types = map[string][]string{}, map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var walk func(path string)
	walk = func(path string) {
		tok, err := dec.Token()
		require.NoError(t, err)
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				members[path] = []string{}
				for dec.More() {
					k, err := dec.Token()
					require.NoError(t, err)
					members[path] = append(members[path], k.(string))
					walk(path + "/" + k.(string))
				}
			case '[':
				for i := 0; dec.More(); i++ {
					walk(path + "/*")
				}
			}
			_, err := dec.Token() // closing delimiter
			require.NoError(t, err)
			if v == '{' {
				types[path] = "object"
			} else {
				types[path] = "array"
			}
		case json.Number:
			types[path] = "number"
		case string:
			types[path] = "string"
		case nil:
			types[path] = "null"
		case bool:
			types[path] = "boolean"
		}
	}
	walk("")
	return members, types
}

// TestRenderManifestShapeOfMargoExample compares our manifest with Margo's
// DesiredStateManifest-001.json: the same members in the same order and of
// the same types, plus the optional sizeBytes rc.3 defines.
func TestRenderManifestShapeOfMargoExample(t *testing.T) {
	example := readRenderFile(t, manifestExample)
	js, _, err := RenderManifest(StateManifest{Version: 101, Deployments: manifestEntries()[1:2]})
	require.NoError(t, err)
	wantMembers, wantTypes := jsonShape(t, example)
	gotMembers, gotTypes := jsonShape(t, js)
	for path, want := range wantMembers {
		got := slices.DeleteFunc(slices.Clone(gotMembers[path]), func(s string) bool { return s == "sizeBytes" })
		require.Equal(t, want, got, "members of %q", path)
	}
	for path, want := range wantTypes {
		require.Equal(t, want, gotTypes[path], "type of %q", path)
	}
	require.Equal(t, "number", gotTypes["/bundle/sizeBytes"])
	require.Equal(t, "number", gotTypes["/deployments/*/sizeBytes"])
	require.Len(t, gotMembers, len(wantMembers), "objects: got %v, want %v", gotMembers, wantMembers)

	// The example's one deployment, with our (unshortened) digest.
	m := decodeManifest(t, js)
	var ex manifestJSONDoc
	require.NoError(t, json.Unmarshal(example, &ex))
	require.Equal(t, ex.ManifestVersion, m.ManifestVersion)
	require.Equal(t, ex.Deployments[0].DeploymentID, m.Deployments[0].DeploymentID)
	require.Equal(t, ex.Bundle.MediaType, m.Bundle.MediaType)
}

// TestRenderManifestGolden pins the exact bytes of a two-deployment
// manifest. The bundle's digest and size depend on compress/flate, which a
// Go release may change, so the golden file has placeholders for them and
// the test checks them against the bundle returned. Run with
// -update-manifest-golden to rewrite the file.
func TestRenderManifestGolden(t *testing.T) {
	js, bundle, err := RenderManifest(StateManifest{Version: 7, Deployments: manifestEntries()[:2]})
	require.NoError(t, err)
	d := Digest(bundle)
	templ := strings.ReplaceAll(string(js), d, "{{bundleDigest}}")
	templ = strings.Replace(templ, fmt.Sprintf(`"sizeBytes": %d,`+"\n    \"url\": \"/api/v1/bundles/", len(bundle)),
		`"sizeBytes": {{bundleSize}},`+"\n    \"url\": \"/api/v1/bundles/", 1)
	if *updateManifestGolden {
		require.NoError(t, os.WriteFile(manifestGolden, []byte(templ), 0o644))
	}
	want := string(readRenderFile(t, manifestGolden))
	require.Equal(t, want, templ)
	require.Equal(t, 2, strings.Count(want, "{{bundleDigest}}"), "golden file names the bundle digest in digest and url")
	require.Equal(t, 1, strings.Count(want, "{{bundleSize}}"))
}
