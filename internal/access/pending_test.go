package access

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPending(t *testing.T) {
	var none *Pending // no call in progress: everything is a no-op
	none.SetDetail(map[string]any{"a": 1})
	none.BeginTx()
	_, ok := none.TakeForTx(time.Now(), true)
	assert.False(t, ok)
	none.EndTx(true)
	_, ok = none.Written()
	assert.False(t, ok)
	assert.Nil(t, PendingOf(context.Background()))

	p := NewPending(AuditEntry{Actor: "tok", Action: "rollback\x00Deployment"}, 201, 202)
	assert.Same(t, p, PendingOf(WithPending(context.Background(), p)))
	_, ok = p.TakeForTx(time.Now(), false)
	assert.False(t, ok, "only inside a transaction begun with BeginTx")
	p.SetDetail(map[string]any{"force": true})
	p.BeginTx()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	e, ok := p.TakeForTx(at, false)
	assert.True(t, ok)
	assert.Equal(t, 202, e.Status)
	assert.Equal(t, "success", e.Outcome)
	assert.Equal(t, at.UTC(), e.At)
	assert.Equal(t, "rollback\uFFFDDeployment", e.Action, "made storable")
	assert.Equal(t, map[string]any{"force": true}, e.Detail)
	_, ok = p.TakeForTx(at, false)
	assert.False(t, ok, "taken once per transaction")
	p.SetDetail(map[string]any{"late": true})
	assert.NotContains(t, e.Detail, "late", "the taken entry is a copy")
	p.EndTx(false)
	_, ok = p.Written()
	assert.False(t, ok, "rolled back")

	p.BeginTx()
	_, ok = p.TakeForTx(at, true)
	assert.True(t, ok)
	p.EndTx(true)
	status, ok := p.Written()
	assert.True(t, ok)
	assert.Equal(t, 201, status)
	p.BeginTx()
	_, ok = p.TakeForTx(at, false)
	assert.False(t, ok, "written once per call")
}
