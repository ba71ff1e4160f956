package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupsThatStartTheServerSaySo: a group whose run function calls
// startServer is marked server, so that selecting it alone (-only) builds
// bin/wfm first; and no other group is. Read from this package's source.
func TestGroupsThatStartTheServerSaySo(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	starts := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "startServer" {
					starts[fn.Name.Name] = true
				}
				return true
			})
		}
	}
	require.NotEmpty(t, starts)
	for _, g := range allGroups() {
		name := runtime.FuncForPC(reflect.ValueOf(g.run).Pointer()).Name()
		name = name[strings.LastIndex(name, ".")+1:]
		assert.Equal(t, starts[name], g.server, "group %s (%s): starts the server: %v, marked: %v", g.name, name, starts[name], g.server)
	}
}
