package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// signature returns the webhook-signature header of a message: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per key, space-separated
// (two during a rotation's overlap).
func signature(keys [][]byte, id string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	sigs := make([]string, len(keys))
	for i, k := range keys {
		h := hmac.New(sha256.New, k)
		h.Write([]byte(id))
		h.Write([]byte{'.'})
		h.Write([]byte(ts))
		h.Write([]byte{'.'})
		h.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
	}
	return strings.Join(sigs, " ")
}
