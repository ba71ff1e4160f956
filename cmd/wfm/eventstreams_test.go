package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEventStreamsSetting(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 256, c.eventStreams, "the documented default")

	c, err = parseConfig(nil, func(k string) string { return map[string]string{"WFM_EVENT_STREAMS": "1000"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1000, c.eventStreams, "WFM_EVENT_STREAMS")
	c, err = parseConfig([]string{"-event-streams", "1"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1, c.eventStreams, "the lowest value")

	for _, v := range []string{"0", "-1", "many", "100001", "1.5", ""} {
		_, err := parseConfig([]string{"-event-streams", v}, noEnv, io.Discard)
		assert.Error(t, err, "parseConfig(-event-streams %q)", v)
	}
}
