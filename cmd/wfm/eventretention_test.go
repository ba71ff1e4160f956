package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventRetentionSetting(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 720*time.Hour, c.eventRetention, "the documented default")

	c, err = parseConfig(nil, func(k string) string { return map[string]string{"WFM_EVENT_RETENTION": "168h"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 168*time.Hour, c.eventRetention, "WFM_EVENT_RETENTION")
	c, err = parseConfig([]string{"-event-retention", "1h"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, c.eventRetention, "the lowest value")

	for _, v := range []string{"30d", "month", "0", "-1h", "59m", "87601h", ""} {
		_, err := parseConfig([]string{"-event-retention", v}, noEnv, io.Discard)
		assert.Error(t, err, "parseConfig(-event-retention %q)", v)
	}
}
