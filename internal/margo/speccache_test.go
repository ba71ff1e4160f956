package margo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// renderWhole renders in the way RenderDeployment did before it encoded the
// document in two parts: the whole root mapping with one encoder.
func renderWhole(t testing.TB, in DeploymentInput) []byte {
	t.Helper()
	r := renderer{}
	name, namespace := r.check(in)
	spec := r.spec(in)
	root := r.mapping(
		"id", r.str(in.DeploymentID, "/deploymentId"),
		"metadata", r.mapping("name", r.str(name, "/name"), "namespace", r.str(namespace, "/namespace"),
			"deviceId", r.str(in.DeviceID, "/deviceId")),
		"spec", spec,
	)
	require.Empty(t, r.problems)
	b, err := encodeDocument(root, 0)
	require.NoError(t, err)
	return b
}

// specCacheInputs are varied inputs: Margo's examples, every value type,
// multi-line and long strings, upgrade extensions with drains.
func specCacheInputs(t testing.TB) []DeploymentInput {
	t.Helper()
	ins := []DeploymentInput{renderHelmInput(t), renderUpgradeInput(t)}
	values := map[string]any{
		"s": "yes", "m": "line 1\nline 2\n", "long": fmt.Sprint(make([]int, 40)), "i": 4, "f": 1.0, "f32": float32(0.25),
		"n": json.Number("12"), "b": true, "l": []any{"1", int64(2), 3.0, true}, "sl": []string{"no", "0x1"},
	}
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	d := renderTypeDescription(names...)
	ins = append(ins, DeploymentInput{DeploymentID: renderDeploymentID, DeviceID: "gw/child-1", Description: d,
		Profile: d.DeploymentProfiles[0], Values: values,
		Extension: Extension{Revision: 7, Operation: lifecycle.OperationUpgrade, FromVersion: lifecycle.MustParseVersion("0.9.0"),
			Strategy: lifecycle.StrategyRecreate, Drain: &lifecycle.DrainPolicy{Required: true}}})
	return ins
}

// randomUUID is a canonical lowercase UUID; one in four is made of digits
// only (the spelling most likely to be read as something else).
func randomUUID(rng *rand.Rand) string {
	hex := "0123456789abcdef"
	if rng.IntN(4) == 0 {
		hex = "0123456789"
	}
	b := make([]byte, 36)
	for i := range b {
		switch i {
		case 8, 13, 18, 23:
			b[i] = '-'
		default:
			b[i] = hex[rng.IntN(len(hex))]
		}
	}
	return string(b)
}

func TestRenderPartsAreTheWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i, in := range specCacheInputs(t) {
		for range 50 {
			in.DeploymentID = randomUUID(rng)
			in.DeviceID = []string{"1", "true", "0123", "1e3", "gw/*", "a.b~c_d-e"}[rng.IntN(6)]
			in.Name, in.Namespace = "", ""
			require.Equal(t, string(renderWhole(t, in)), string(renderMust(t, in)), "input %d", i)
		}
	}
}

func TestSpecCacheSameBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := NewSpecCache(64)
	ins := specCacheInputs(t)
	for range 300 {
		in := ins[rng.IntN(len(ins))]
		in.DeploymentID = randomUUID(rng)
		in.DeviceID = fmt.Sprintf("dev-%d", rng.IntN(1000))
		got, err := c.Render(in)
		require.NoError(t, err)
		require.Equal(t, string(renderMust(t, in)), string(got))
	}
	require.Equal(t, len(ins), c.Len(), "one spec per distinct input")
}

// Values that read the same in JSON but are written differently, or a
// different extension, never share a spec.
func TestSpecCacheKeysOnWhatTheSpecIsMadeOf(t *testing.T) {
	d := renderTypeDescription("v")
	base := DeploymentInput{DeploymentID: renderDeploymentID, DeviceID: "dev-1", Description: d, Profile: d.DeploymentProfiles[0],
		Extension: Extension{Revision: 1, Operation: lifecycle.OperationInstall}}
	c := NewSpecCache(100)
	for _, v := range []any{1, 1.0, "1", json.Number("1"), float32(1), true, []any{1}, []string{"1"}, []any{"1"}} {
		in := base
		in.Values = map[string]any{"v": v}
		got, err := c.Render(in)
		require.NoError(t, err)
		require.Equal(t, string(renderMust(t, in)), string(got), "value %#v", v)
	}
	for _, ext := range []Extension{
		{Revision: 2, Operation: lifecycle.OperationInstall},
		{Revision: 2, Operation: lifecycle.OperationReconfigure, FromVersion: lifecycle.MustParseVersion("1.0.0")},
		{Revision: 2, Operation: lifecycle.OperationUpgrade, FromVersion: lifecycle.MustParseVersion("0.5.0"), Drain: &lifecycle.DrainPolicy{}},
		{Revision: 2, Operation: lifecycle.OperationUpgrade, FromVersion: lifecycle.MustParseVersion("0.5.0"), Drain: &lifecycle.DrainPolicy{Required: true}},
	} {
		in := base
		in.Values, in.Extension = map[string]any{"v": "x"}, ext
		got, err := c.Render(in)
		require.NoError(t, err)
		require.Equal(t, string(renderMust(t, in)), string(got), "extension %+v", ext)
	}
	// A profile changed after the description was parsed is refused, hit or miss.
	in := base
	in.Profile.Components = nil
	_, err := c.Render(in)
	require.Equal(t, ProblemInvalidRender, lifecycle.ErrorType(err))
}

func TestSpecCacheBounded(t *testing.T) {
	d := renderTypeDescription("v")
	c := NewSpecCache(3)
	for i := range 10 {
		_, err := c.Render(DeploymentInput{DeploymentID: renderDeploymentID, DeviceID: "dev-1", Description: d, Profile: d.DeploymentProfiles[0],
			Values: map[string]any{"v": i}, Extension: Extension{Revision: 1, Operation: lifecycle.OperationInstall}})
		require.NoError(t, err)
		require.LessOrEqual(t, c.Len(), 3)
	}
}
