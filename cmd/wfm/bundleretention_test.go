package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBundleRetentionSetting(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 168*time.Hour, c.bundleRetention, "the documented default (design §5: 7 days)")

	c, err = parseConfig(nil, func(k string) string { return map[string]string{"WFM_BUNDLE_RETENTION": "48h"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 48*time.Hour, c.bundleRetention, "WFM_BUNDLE_RETENTION")
	c, err = parseConfig([]string{"-bundle-retention", "1h"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, c.bundleRetention, "the lowest value")
	c, err = parseConfig([]string{"-bundle-retention", "8760h"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 8760*time.Hour, c.bundleRetention, "the highest value")

	for _, v := range []string{"7d", "week", "0", "-1h", "59m", "8761h", ""} {
		_, err := parseConfig([]string{"-bundle-retention", v}, noEnv, io.Discard)
		assert.Error(t, err, "parseConfig(-bundle-retention %q)", v)
	}
}
