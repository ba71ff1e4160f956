package httpapi_test

import (
	"os"
	"testing"

	"github.com/wfm-dev/wfm/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
