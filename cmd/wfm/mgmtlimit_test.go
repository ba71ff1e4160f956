package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

func TestManagementLimitSettings(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 50.0, c.mgmtRate, "the documented default")
	assert.Equal(t, 100, c.mgmtBurst)
	assert.Empty(t, c.trustedProxies, "no proxy is trusted by default")
	assert.NotNil(t, mgmtLimiter(c))

	c, err = parseConfig([]string{"-mgmt-rate", "0"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Nil(t, mgmtLimiter(c), "-mgmt-rate 0 lifts the limit")

	env := map[string]string{"WFM_MGMT_RATE": "5", "WFM_MGMT_BURST": "7", "WFM_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1 ,2001:db8::/32"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5.0, c.mgmtRate)
	assert.Equal(t, 7, c.mgmtBurst)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}, c.trustedProxies)

	assert.Equal(t, "x-forwarded-for", c.forwardedHeader, "the default forwarding header")

	// IPv4-mapped prefixes match the (unmapped) peer addresses; one header.
	c, err = parseConfig([]string{"-trusted-proxies", "::ffff:10.0.0.0/104,::ffff:192.0.2.1", "-forwarded-header", "Forwarded"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32")}, c.trustedProxies)
	assert.Equal(t, "forwarded", c.forwardedHeader)

	for _, args := range [][]string{{"-mgmt-rate", "-1"}, {"-mgmt-rate", "fast"}, {"-mgmt-rate", "Inf"}, {"-mgmt-burst", "0"}, {"-trusted-proxies", "proxy.example"},
		// Every peer trusted: any client names its own address.
		{"-trusted-proxies", "10.0.0.0/8,0.0.0.0/0"}, {"-trusted-proxies", "::/0"}, {"-trusted-proxies", "::ffff:0.0.0.0/96"},
		{"-forwarded-header", "x-real-ip"}} {
		_, err := parseConfig(args, noEnv, io.Discard)
		assert.Error(t, err, "%v", args)
	}
}

// TestRefusalFlushErrorDuringOutage: an aggregate the database cannot take
// because it is away is an outage (WARN), anything else an ERROR.
func TestRefusalFlushErrorDuringOutage(t *testing.T) {
	var buf bytes.Buffer
	onErr := refusalFlushError(slog.New(slog.NewTextHandler(&buf, nil)))
	onErr(fmt.Errorf("access: write aggregate: %w", &lifecycle.Error{Code: lifecycle.EUNAVAILABLE, Type: "unavailable", Message: "down"}))
	assert.Contains(t, buf.String(), "level=WARN")
	assert.NotContains(t, buf.String(), "level=ERROR")
	buf.Reset()
	onErr(fmt.Errorf("access: write aggregate: boom"))
	assert.Contains(t, buf.String(), "level=ERROR")
}
