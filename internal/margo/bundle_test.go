package margo

import (
	"archive/tar"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margotest"
)

// realisticYAML is a rendered ApplicationDeployment (RenderDeployment's
// output for a two-component Helm application), 3,695 bytes.
const realisticYAML = "testdata/render-helm-upgrade.golden.yaml"

// realisticFiles returns n bundle files named BundleFileName(id) holding
// the realistic document with its id replaced, in an unsorted order.
func realisticFiles(t testing.TB, n int) []BundleFile {
	t.Helper()
	yaml := string(readRenderFile(t, realisticYAML))
	const id = "a3e2f5dc-912e-494f-8395-52cf3769bc06"
	require.Contains(t, yaml, id)
	files := make([]BundleFile, n)
	for i := range files {
		// Ids in reverse order of i, so the input is not sorted.
		newID := fmt.Sprintf("%08x-0000-4000-8000-%012x", n-i, i)
		files[i] = BundleFile{Name: BundleFileName(newID), Data: []byte(strings.ReplaceAll(yaml, id, newID))}
	}
	return files
}

func sortedFiles(files []BundleFile) []BundleFile {
	s := slices.Clone(files)
	slices.SortFunc(s, func(a, b BundleFile) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// referenceTar is what archive/tar writes for files (in the order given),
// with the deterministic headers, including the end-of-archive marker.
func referenceTar(t testing.TB, files []BundleFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Mode: 0o644,
			Size: int64(len(f.Data)), ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}))
		_, err := tw.Write(f.Data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func piecesOf(t testing.TB, files []BundleFile) []BundlePiece {
	t.Helper()
	pieces := make([]BundlePiece, len(files))
	for i, f := range files {
		p, err := NewBundlePiece(f.Name, f.Data)
		require.NoError(t, err)
		pieces[i] = p
	}
	return pieces
}

// oneMember reads b as gzip without multistream: the first member must
// hold the whole of want, and no byte may follow that member.
func oneMember(t *testing.T, b, want []byte) {
	t.Helper()
	br := bytes.NewReader(b) // an io.ByteReader: gzip reads no byte past the member
	zr, err := gzip.NewReader(br)
	require.NoError(t, err)
	zr.Multistream(false)
	got, err := io.ReadAll(zr) // checks the CRC-32 and ISIZE of the trailer
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the first gzip member is not the whole tar (%d bytes, want %d)", len(got), len(want))
	require.Zero(t, br.Len(), "bytes follow the first gzip member")
	require.ErrorIs(t, zr.Reset(br), io.EOF, "a second gzip member follows")
}

func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lengths := []int{0, 1, 2, 3, 4, 7, 8, 511, 512, 513, 1024, 4096, 65535, 65536, 100_000}
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, la := range lengths {
		for _, lb := range lengths {
			a, b := random(la), random(lb)
			got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(lb))
			want := crc32.ChecksumIEEE(append(slices.Clone(a), b...))
			require.Equal(t, want, got, "crc32Combine(len %d, len %d)", la, lb)
		}
	}
	for range 200 {
		a, b := random(rng.IntN(3000)), random(rng.IntN(3000))
		got := crc32Combine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), int64(len(b)))
		require.Equal(t, crc32.ChecksumIEEE(append(slices.Clone(a), b...)), got, "crc32Combine(len %d, len %d)", len(a), len(b))
	}
	// Many pieces folded left, as WriteBundle does.
	var all []byte
	var crc uint32
	for range 50 {
		p := random(rng.IntN(2000))
		all = append(all, p...)
		crc = crc32Combine(crc, crc32.ChecksumIEEE(p), int64(len(p)))
	}
	require.Equal(t, crc32.ChecksumIEEE(all), crc)
	// Lengths of 512 MiB and more use the table beyond 2^32 bits, where it
	// repeats: x^(2^32) = x modulo the CRC-32 polynomial.
	require.Equal(t, x2nModP[0], mulModP(x2nModP[31], x2nModP[31]))
}

func TestBundleEndPiece(t *testing.T) {
	require.Equal(t, byte(1), bundleEndPiece[0]&1, "the first block of the end piece must be final (BFINAL)")
	br := bytes.NewReader(bundleEndPiece)
	got, err := io.ReadAll(flate.NewReader(br))
	require.NoError(t, err, "the end piece is a complete DEFLATE stream")
	require.Equal(t, make([]byte, bundleEndSize), got, "the end piece is the tar end-of-archive marker")
	require.Zero(t, br.Len(), "nothing follows the final block")
	require.Equal(t, uint32(bundleEndCRC32), crc32.ChecksumIEEE(got))
}

func TestNewBundlePiece(t *testing.T) {
	files := append(realisticFiles(t, 1), []BundleFile{
		{Name: "empty.yaml"},
		{Name: "one", Data: []byte("x")},
		{Name: "block.yaml", Data: bytes.Repeat([]byte("y"), 512)},
		{Name: strings.Repeat("n", 100), Data: bytes.Repeat([]byte("long line\n"), 10_000)},
	}...)
	for _, f := range files {
		p, err := NewBundlePiece(f.Name, f.Data)
		require.NoError(t, err, f.Name)
		entry := referenceTar(t, []BundleFile{f})
		entry = entry[:len(entry)-bundleEndSize] // the entry alone, without the end-of-archive marker
		require.Equal(t, int64(len(entry)), p.Size, "%s: size", f.Name)
		require.Equal(t, crc32.ChecksumIEEE(entry), p.CRC32, "%s: CRC-32", f.Name)
		require.True(t, bytes.HasSuffix(p.Deflate, []byte{0, 0, 0xff, 0xff}), "%s: not ended by a sync flush", f.Name)

		// Alone, the piece inflates to the entry and is not final.
		got, err := io.ReadAll(flate.NewReader(bytes.NewReader(p.Deflate)))
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "%s: a piece must not end the stream", f.Name)
		require.True(t, bytes.Equal(entry, got), "%s: the piece does not inflate to archive/tar's entry", f.Name)

		// Followed by the end piece, it is a complete stream.
		got, err = io.ReadAll(flate.NewReader(bytes.NewReader(append(slices.Clone(p.Deflate), bundleEndPiece...))))
		require.NoError(t, err, f.Name)
		require.True(t, bytes.Equal(referenceTar(t, []BundleFile{f}), got), "%s: piece and end piece", f.Name)

		again, err := NewBundlePiece(f.Name, f.Data)
		require.NoError(t, err)
		require.Equal(t, p, again, "%s: NewBundlePiece is not deterministic", f.Name)
	}

	for _, name := range []string{"", "dir/a.yaml", "..", ".a.yaml", "a b.yaml", strings.Repeat("a", 101)} {
		p, err := NewBundlePiece(name, []byte("a: 1\n"))
		require.Zero(t, p, "%q", name)
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%q: %v", name, err)
		require.Equal(t, ProblemInvalidBundle, lifecycle.ErrorType(err), "%q", name)
	}
}

func TestWriteBundle(t *testing.T) {
	for _, n := range []int{1, 2, 7} {
		files := sortedFiles(realisticFiles(t, n))
		pieces := piecesOf(t, files)
		var buf bytes.Buffer
		written, err := WriteBundle(&buf, pieces)
		require.NoError(t, err)
		b := buf.Bytes()
		require.Equal(t, int64(len(b)), written, "WriteBundle's count")
		require.Equal(t, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}, b[:10], "gzip header")

		// One member holding exactly archive/tar's bytes for these files.
		oneMember(t, b, referenceTar(t, files))
		// Read back by archive/tar and compress/gzip: the files, in order.
		require.Equal(t, files, openBundle(t, b))
		// Margo's rules: one or more ApplicationDeployment YAML files at the root.
		require.Empty(t, margotest.BundleProblems(b))

		assembled, err := AssembleBundle(pieces)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, assembled), "AssembleBundle differs from WriteBundle")
		built, err := BuildBundle(files)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, built), "BuildBundle is not the assembly of the files' pieces")
	}
}

func TestWriteBundleErrors(t *testing.T) {
	for _, pieces := range [][]BundlePiece{nil, {}} {
		n, err := WriteBundle(io.Discard, pieces)
		require.Zero(t, n)
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%v", err)
		require.Equal(t, ProblemEmptyBundle, lifecycle.ErrorType(err))
		b, err := AssembleBundle(pieces)
		require.Nil(t, b)
		require.Equal(t, ProblemEmptyBundle, lifecycle.ErrorType(err))
	}

	good := piecesOf(t, realisticFiles(t, 2))
	for name, damage := range map[string]func(*BundlePiece){
		"size not a block multiple": func(p *BundlePiece) { p.Size = 700 },
		"size zero":                 func(p *BundlePiece) { p.Size = 0 },
		"truncated":                 func(p *BundlePiece) { p.Deflate = p.Deflate[:len(p.Deflate)-1] },
		"no data":                   func(p *BundlePiece) { p.Deflate = nil },
	} {
		pieces := slices.Clone(good)
		damage(&pieces[1])
		var buf bytes.Buffer
		n, err := WriteBundle(&buf, pieces)
		require.ErrorIs(t, err, errDamagedPiece, name)
		require.NotEqual(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%s: a damaged piece is an internal error", name)
		require.Zero(t, n, name)
		require.Zero(t, buf.Len(), "%s: nothing is written before the pieces are checked", name)
	}

	// The writer's error, with the count of bytes it took.
	full, err := AssembleBundle(good)
	require.NoError(t, err)
	for _, limit := range []int{0, 5, 10, 500, len(full) - 1} {
		w := &failingWriter{limit: limit}
		n, err := WriteBundle(w, good)
		require.ErrorIs(t, err, errWriterFull, "limit %d", limit)
		require.Equal(t, int64(limit), n, "limit %d", limit)
		require.True(t, bytes.Equal(full[:limit], w.buf.Bytes()), "limit %d: the bytes taken", limit)
	}
}

var errWriterFull = errors.New("writer full")

// failingWriter takes limit bytes, then fails.
type failingWriter struct {
	buf   bytes.Buffer
	limit int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	room := w.limit - w.buf.Len()
	if len(p) <= room {
		return w.buf.Write(p)
	}
	w.buf.Write(p[:room])
	return room, errWriterFull
}

// TestAssembleBundleSubsets: dropping pieces (a removal) and keeping the
// order gives a valid bundle of exactly the remaining files, byte for byte
// the one BuildBundle makes of them.
func TestAssembleBundleSubsets(t *testing.T) {
	files := sortedFiles(append(realisticFiles(t, 6), BundleFile{Name: "zz.yaml", Data: []byte("a: 1\n")}))
	pieces := piecesOf(t, files)
	rng := rand.New(rand.NewPCG(7, 8))
	for range 40 {
		var keptFiles []BundleFile
		var keptPieces []BundlePiece
		for i := range files {
			if rng.IntN(2) == 0 {
				keptFiles = append(keptFiles, files[i])
				keptPieces = append(keptPieces, pieces[i])
			}
		}
		if len(keptFiles) == 0 {
			continue
		}
		b, err := AssembleBundle(keptPieces)
		require.NoError(t, err)
		oneMember(t, b, referenceTar(t, keptFiles))
		require.Equal(t, keptFiles, openBundle(t, b))
		require.Empty(t, margotest.BundleProblems(b))
		built, err := BuildBundle(keptFiles)
		require.NoError(t, err)
		require.True(t, bytes.Equal(built, b), "the assembled subset differs from BuildBundle of it")
	}
}

// pythonReader reads a bundle with Python's zlib, gzip and tarfile: the
// gzip member must be one and end the file, gzip checks the CRC-32 and
// length, and tarfile lists the members with their bytes.
const pythonReader = `
import gzip, json, sys, tarfile, zlib
raw = open(sys.argv[1], "rb").read()
d = zlib.decompressobj(wbits=31)
tar = d.decompress(raw) + d.flush()
assert d.eof, "the gzip member is not complete"
assert d.unused_data == b"", "bytes follow the first gzip member"
assert gzip.decompress(raw) == tar
out = []
with tarfile.open(sys.argv[1], "r:gz") as tf:
    for m in tf.getmembers():
        out.append({"name": m.name, "regular": m.isreg(), "mode": m.mode, "uid": m.uid, "gid": m.gid,
                    "mtime": m.mtime, "data": tf.extractfile(m).read().hex() if m.isreg() else None})
json.dump({"tarSize": len(tar), "members": out}, sys.stdout)
`

// TestBundleReadersNotGo reads bundles of several files and of one file
// with GNU tar, gzip and Python's tarfile.
func TestBundleReadersNotGo(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d files", n), func(t *testing.T) {
			files := sortedFiles(realisticFiles(t, n))
			if n > 1 {
				files = sortedFiles(append(files, BundleFile{Name: "empty.yaml"}, BundleFile{Name: "x", Data: []byte("k: v\n")}))
			}
			b, err := AssembleBundle(piecesOf(t, files))
			require.NoError(t, err)
			dir := t.TempDir()
			path := filepath.Join(dir, "bundle.tar.gz")
			require.NoError(t, os.WriteFile(path, b, 0o600))

			t.Run("gzip -t", func(t *testing.T) {
				out := runTool(t, "gzip", "-t", path)
				require.Empty(t, out)
			})
			t.Run("tar -tvzf", func(t *testing.T) {
				out := runTool(t, "tar", "-tvzf", path)
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				require.Len(t, lines, len(files), "tar lists: %s", out)
				for i, line := range lines {
					fields := strings.Fields(line)
					require.Len(t, fields, 6, "tar -tv line %q", line)
					require.Equal(t, "-rw-r--r--", fields[0], line)
					require.Equal(t, "0/0", fields[1], line)
					require.Equal(t, fmt.Sprint(len(files[i].Data)), fields[2], line)
					require.Equal(t, "1970-01-01", fields[3], line)
					require.Equal(t, files[i].Name, fields[5], line)
				}
			})
			t.Run("tar -xzf", func(t *testing.T) {
				into := filepath.Join(dir, "x")
				require.NoError(t, os.Mkdir(into, 0o700))
				runTool(t, "tar", "-xzf", path, "-C", into)
				entries, err := os.ReadDir(into)
				require.NoError(t, err)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				var want []string
				for _, f := range files {
					want = append(want, f.Name)
				}
				require.Equal(t, want, names, "extracted files")
				for _, f := range files {
					got, err := os.ReadFile(filepath.Join(into, f.Name))
					require.NoError(t, err)
					require.True(t, bytes.Equal(f.Data, got), "%s: extracted bytes differ", f.Name)
				}
			})
			t.Run("python tarfile", func(t *testing.T) {
				out := runTool(t, "python3", "-c", pythonReader, path)
				var got struct {
					TarSize int `json:"tarSize"`
					Members []struct {
						Name           string
						Regular        bool
						Mode, UID, GID int
						MTime          int64
						Data           string
					} `json:"members"`
				}
				require.NoError(t, json.Unmarshal([]byte(out), &got), out)
				require.Equal(t, len(referenceTar(t, files)), got.TarSize)
				require.Len(t, got.Members, len(files))
				for i, m := range got.Members {
					require.Equal(t, files[i].Name, m.Name)
					require.True(t, m.Regular, m.Name)
					require.Equal(t, 0o644, m.Mode, m.Name)
					require.Zero(t, m.UID, m.Name)
					require.Zero(t, m.GID, m.Name)
					require.Zero(t, m.MTime, m.Name)
					require.Equal(t, hex.EncodeToString(files[i].Data), m.Data, "%s: bytes differ", m.Name)
				}
			})
		})
	}
}

// runTool runs a program that is not Go's, skipping the test if it is not
// installed, and returns its standard output.
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	require.NoError(t, cmd.Run(), "%s %s: %s", name, strings.Join(args, " "), stderr.String())
	require.Empty(t, stderr.String(), "%s wrote to stderr", name)
	return stdout.String()
}

func TestManifestJSON(t *testing.T) {
	entries := manifestEntries()
	js, bundle, err := RenderManifest(StateManifest{Version: 42, Deployments: entries})
	require.NoError(t, err)

	// What a store that keeps digests, sizes and pieces renders: the same bytes.
	docs := make([]ManifestDocument, len(entries))
	for i, e := range entries {
		docs[i] = ManifestDocument{DeploymentID: e.DeploymentID, Digest: Digest(e.YAML), SizeBytes: int64(len(e.YAML))}
	}
	orig := slices.Clone(docs)
	got, err := ManifestJSON(42, docs, Digest(bundle), int64(len(bundle)))
	require.NoError(t, err)
	require.Equal(t, string(js), string(got))
	require.Equal(t, orig, docs, "ManifestJSON must not reorder the caller's slice")

	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b ManifestEntry) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	pieces := make([]BundlePiece, len(sorted))
	for i, e := range sorted {
		pieces[i], err = NewBundlePiece(BundleFileName(e.DeploymentID), e.YAML)
		require.NoError(t, err)
	}
	assembled, err := AssembleBundle(pieces)
	require.NoError(t, err)
	require.True(t, bytes.Equal(bundle, assembled), "RenderManifest's bundle is not the assembly of the documents' pieces")
	require.Equal(t, "c0000000-0000-4000-8000-000000000003.yaml", BundleFileName("c0000000-0000-4000-8000-000000000003"))

	// No documents: bundle null, whatever is said of a bundle.
	empty, _, err := RenderManifest(StateManifest{Version: 3})
	require.NoError(t, err)
	for _, d := range []struct {
		digest string
		size   int64
	}{{"", 0}, {"garbage", -1}, {Digest(bundle), int64(len(bundle))}} {
		got, err := ManifestJSON(3, nil, d.digest, d.size)
		require.NoError(t, err)
		require.Equal(t, string(empty), string(got))
	}
}

func TestManifestJSONErrors(t *testing.T) {
	good := ManifestDocument{DeploymentID: "a3e2f5dc-912e-494f-8395-52cf3769bc06", Digest: Digest([]byte("x")), SizeBytes: 1}
	with := func(edit func(*ManifestDocument)) []ManifestDocument {
		d := good
		edit(&d)
		return []ManifestDocument{d}
	}
	bundleDigest := Digest([]byte("bundle"))
	for _, tt := range []struct {
		name       string
		version    uint64
		docs       []ManifestDocument
		digest     string
		bundleSize int64
	}{
		{"version 0", 0, nil, "", 0},
		{"duplicate", 1, []ManifestDocument{good, good}, bundleDigest, 10},
		{"uppercase id", 1, with(func(d *ManifestDocument) { d.DeploymentID = strings.ToUpper(d.DeploymentID) }), bundleDigest, 10},
		{"path id", 1, with(func(d *ManifestDocument) { d.DeploymentID = "../x" }), bundleDigest, 10},
		{"bad digest", 1, with(func(d *ManifestDocument) { d.Digest = "sha256:abc" }), bundleDigest, 10},
		{"empty document", 1, with(func(d *ManifestDocument) { d.SizeBytes = 0 }), bundleDigest, 10},
		{"bad bundle digest", 1, []ManifestDocument{good}, "sha256:" + strings.Repeat("A", 64), 10},
		{"no bundle digest", 1, []ManifestDocument{good}, "", 10},
		{"bundle size 0", 1, []ManifestDocument{good}, bundleDigest, 0},
	} {
		js, err := ManifestJSON(tt.version, tt.docs, tt.digest, tt.bundleSize)
		require.Nil(t, js, tt.name)
		require.Equal(t, lifecycle.EINVALID, lifecycle.ErrorCode(err), "%s: %v", tt.name, err)
		require.Equal(t, ProblemInvalidManifest, lifecycle.ErrorType(err), tt.name)
	}
	_, err := ManifestJSON(1, []ManifestDocument{good}, bundleDigest, 10)
	require.NoError(t, err, "the good case of the table")
}

func BenchmarkNewBundlePiece(b *testing.B) {
	f := realisticFiles(b, 1)[0]
	b.SetBytes(int64(len(f.Data)))
	b.ReportAllocs()
	var p BundlePiece
	for b.Loop() {
		var err error
		if p, err = NewBundlePiece(f.Name, f.Data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p.Deflate)), "piece-bytes")
}

// BenchmarkWriteBundle10000 is what a gateway client's publication pays for
// its bundle once the pieces are kept: assembling 10,000 pieces of a
// realistic deployment into sha256 (the bundle's digest), and, for the
// share of the assembly itself, into io.Discard. MB/s are of bundle bytes.
func BenchmarkWriteBundle10000(b *testing.B) {
	pieces := piecesOf(b, sortedFiles(realisticFiles(b, 10_000)))
	size, err := WriteBundle(io.Discard, pieces)
	require.NoError(b, err)
	for _, bb := range []struct {
		name string
		w    func() io.Writer
		done func(io.Writer)
	}{
		{"sha256", func() io.Writer { return sha256.New() }, func(w io.Writer) { _ = w.(interface{ Sum([]byte) []byte }).Sum(nil) }},
		{"discard", func() io.Writer { return io.Discard }, func(io.Writer) {}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				w := bb.w()
				if _, err := WriteBundle(w, pieces); err != nil {
					b.Fatal(err)
				}
				bb.done(w)
			}
		})
	}
}
