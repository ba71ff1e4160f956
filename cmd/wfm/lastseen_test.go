package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/pgtest"
)

// TestLastSeenWrittenAtShutdown: the server notes a device's poll and,
// although its minute has not passed, writes it to devices.last_seen_at
// when it shuts down (after the device API drained).
func TestLastSeenWrittenAtShutdown(t *testing.T) {
	url := pgtest.URL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deviceAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, stop := startServer(t, []string{"-dev-header-identity", "-device-listen", deviceAddr}, envWith(map[string]string{"DATABASE_URL": url}))

	do := func(method, path string, body []byte) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+deviceAddr+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(identity.DevHeader, "plant")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	caps := []byte(`{"properties":{"id":"edge","vendor":"v","modelNumber":"m","serialNumber":"s","cpus":[{"cores":2,"architecture":"amd64"}],` +
		`"memory":"1Gi","storage":"1Gi","supportedRuntimes":["oci"],"supportedDeploymentTypes":["compose"]}}`)
	require.Equal(t, http.StatusCreated, do("PUT", "/api/v1/capabilities/edge", caps))
	require.Equal(t, http.StatusOK, do("GET", "/api/v1/deployments", nil))
	// The last poll: the background write, a minute after the start, has
	// not taken it unless the test ran that long; Stop must.
	before := time.Now()
	require.Equal(t, http.StatusOK, do("GET", "/api/v1/deployments", nil))

	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	var seen *time.Time
	read := func() {
		t.Helper()
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT last_seen_at FROM devices WHERE client_id = 'plant' AND id = 'edge'`).Scan(&seen))
	}
	require.NoError(t, stop())
	read()
	require.NotNil(t, seen, "written at shutdown")
	require.False(t, seen.Before(before), "the last poll's instant (%v, after %v)", *seen, before)
}
