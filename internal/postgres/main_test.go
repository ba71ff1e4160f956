package postgres_test

import (
	"os"
	"testing"

	"github.com/wfm-dev/wfm/internal/pgtest"
)

// TestMain is the one of this package (there can be only one): every test
// file here gets its databases from pgtest.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
