package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCORSOriginsSetting(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, c.corsOrigins, "the documented default: none")

	c, err = parseConfig(nil, func(k string) string {
		return map[string]string{"WFM_CORS_ORIGINS": "https://console.example.com, http://localhost:5173,https://CONSOLE.example.com"}[k]
	}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"https://console.example.com", "http://localhost:5173"}, c.corsOrigins, "WFM_CORS_ORIGINS, duplicates dropped")
	c, err = parseConfig([]string{"-cors-origins", "https://a.example.com:8443"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"https://a.example.com:8443"}, c.corsOrigins, "-cors-origins")

	for _, v := range []string{"*", "https://*.example.com", "console.example.com", "https://console.example.com/",
		"https://console.example.com/app", "ftp://console.example.com", "https://user@console.example.com", "null", "https://", "https://a.example.com?x"} {
		_, err := parseConfig([]string{"-cors-origins", v}, noEnv, io.Discard)
		assert.Error(t, err, "parseConfig(-cors-origins %q)", v)
	}
}
