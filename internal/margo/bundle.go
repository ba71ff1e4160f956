package margo

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	flate "github.com/klauspost/compress/flate"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// A bundle is assembled from pieces so that publishing costs in proportion
// to the change, not to the client: each document's tar entry is compressed
// once, when its revision is rendered, and a bundle of 10,000 documents is
// the gzip header, 10,000 stored pieces, one constant end piece and an
// 8-byte trailer. DEFLATE allows this: a fresh compressor never refers to
// bytes before its first input, and a sync flush ends its output on a byte
// boundary with a non-final block, so pieces concatenate into one valid
// stream, which the constant end piece closes with a final block. gzip's
// trailer needs the CRC-32 of the whole tar; it is combined from the pieces'
// CRC-32s and lengths (crc32Combine), so assembling never reads the data
// again. The result is one ordinary gzip member: some agents' readers stop
// after the first member of a multi-member file.
//
// Pieces compress each document on its own, so a bundle no longer gains from
// what its documents have in common. A piece of a realistic deployment (the
// 3,695-byte render-helm-upgrade.golden.yaml, a 4,608-byte tar entry) is
// about 850 bytes, and a bundle of 10,000 such documents differing only in
// their ids is 8.4 MB, where one whole-stream gzip -9 of the same tar is
// 380 KB (1 document: 874 bytes either way). That is the price of
// publishing in proportion to the change; a device that fetches bundles
// fetches one only when its digest changes.

// bundlePieceLevel is the fixed DEFLATE level of pieces, and
// github.com/klauspost/compress/flate the fixed encoder. Both are part of
// the bytes, and so of every digest; they never change silently (a change
// changes the pieces of revisions published afterwards, never a stored
// piece or bundle). Measured with BenchmarkNewBundlePiece (a realistic
// 3,695-byte document, a reused compressor; go1.26.8, this 2-core machine,
// 2026-12-02):
//
//	encoder, level                    piece       CPU per piece
//	compress/flate, 6                 841 bytes   80 µs
//	klauspost/compress/flate, 9       841 bytes  165 µs
//	klauspost/compress/flate, 6       866 bytes   24 µs
//	klauspost/compress/flate, 5       878 bytes   23 µs
//	klauspost/compress/flate, 1       969 bytes   18 µs
//
// The standard library's compressor clears 640 KB of hash tables at every
// reset, most of its time for a piece of a few kilobytes (a profile of the
// server creating deployments: a tenth of its CPU); klauspost's does not.
// Level 6 of klauspost is 3% larger than the standard library's for a
// third of its CPU: pieces are compressed once per revision, on the
// publishing path, and served to every device of the client.
const bundlePieceLevel = 6

// bundleEndPiece is the constant last piece of every bundle: one final
// DEFLATE block (fixed Huffman codes) holding the tar end-of-archive marker,
// two 512-byte blocks of zeros. It is a literal, not compressed at run time,
// so that replicas built with different toolchains write the same bytes
// (zlib's level 9 wrote these; a test checks what they decode to).
var bundleEndPiece = []byte{0x63, 0x60, 0x18, 0x05, 0xa3, 0x60, 0x14, 0x8c, 0x54, 0x00, 0x00}

const (
	bundleEndSize  = 1024       // uncompressed bytes of bundleEndPiece
	bundleEndCRC32 = 0xefb5af2e // CRC-32 (IEEE) of 1024 zero bytes
	tarBlockSize   = 512
)

// bundleGzipHeader is the 10-byte gzip header of every bundle (RFC 1952):
// magic, CM 8 (deflate), no flags (no name, no comment, no extra field), MTIME
// 0, XFL 0 (neither fastest nor maximum compression), OS 255 (unknown).
var bundleGzipHeader = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}

// syncFlushMarker ends every piece: the empty stored block a sync flush
// writes (BFINAL 0, then LEN 0 and NLEN 0xffff once byte-aligned).
var syncFlushMarker = []byte{0x00, 0x00, 0xff, 0xff}

// flateWriters keeps compressors between pieces: a compressor holds
// hundreds of kilobytes of state, and allocating one per piece would
// dominate a batch of thousands of pieces. Reset makes a writer equivalent to a fresh one, so
// reuse does not change the bytes. It holds *flate.Writer values.
var flateWriters sync.Pool

// BundlePiece is one file of a bundle kept ready for assembly: its tar entry
// (USTAR header, the data, zero padding to a multiple of 512 bytes)
// compressed as raw DEFLATE by a fresh compressor and ended with a flush
// that leaves the stream byte-aligned and not final (so pieces can be
// concatenated), with the CRC-32 (IEEE) and length of the uncompressed
// entry.
type BundlePiece struct {
	Deflate []byte
	CRC32   uint32
	Size    int64 // bytes of the uncompressed tar entry
}

// BundleFileName is the bundle file name of a deployment's document:
// "<deploymentId>.yaml".
func BundleFileName(deploymentID string) string { return deploymentID + ".yaml" }

// checkBundleFileName returns EINVALID (ProblemInvalidBundle) if name cannot
// be a bundle file name (see BundleFile.Name).
func checkBundleFileName(name string) error {
	if len(name) > maxBundleNameLength || !bundleNamePattern.MatchString(name) {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalidBundle,
			Message: fmt.Sprintf("bundle file name %q must be 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", truncate(name), maxBundleNameLength)}
	}
	return nil
}

// NewBundlePiece returns the piece of one file: its tar entry, a regular
// file at the archive root in USTAR format, mode 0644, uid and gid 0, no
// user or group name, modification time the Unix epoch, exactly as
// archive/tar writes it, compressed at a fixed level (bundlePieceLevel,
// chosen by measurement) by github.com/klauspost/compress/flate. The bytes
// are deterministic for one version of that module (go.mod pins it); a
// newer one may compress differently, which changes the digests of bundles
// built afterwards but never a stored piece or bundle.
//
// Returns EINVALID with type ProblemInvalidBundle if name is unusable (see
// BundleFile.Name).
func NewBundlePiece(name string, data []byte) (BundlePiece, error) {
	if err := checkBundleFileName(name); err != nil {
		return BundlePiece{}, err
	}
	var entry bytes.Buffer
	entry.Grow(tarBlockSize + len(data) + tarBlockSize)
	tw := tar.NewWriter(&entry)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o644,
		Size:     int64(len(data)),
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
	}
	// Flush pads the entry to a block boundary; Close would add the
	// end-of-archive marker, which only the end piece holds.
	if err := tw.Flush(); err != nil {
		return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
	}

	var out bytes.Buffer
	out.Grow(entry.Len()/3 + 64)
	fw, _ := flateWriters.Get().(*flate.Writer)
	if fw == nil {
		var err error
		if fw, err = flate.NewWriter(&out, bundlePieceLevel); err != nil {
			return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
		}
	} else {
		fw.Reset(&out)
	}
	defer flateWriters.Put(fw)
	if _, err := fw.Write(entry.Bytes()); err != nil {
		return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
	}
	// A sync flush (not Close): byte-aligned, and no final block.
	if err := fw.Flush(); err != nil {
		return BundlePiece{}, fmt.Errorf("margo: bundle piece %s: %w", name, err)
	}
	fw.Reset(nil) // keep no reference to out in the pool
	return BundlePiece{Deflate: out.Bytes(), CRC32: crc32.ChecksumIEEE(entry.Bytes()), Size: int64(entry.Len())}, nil
}

// errDamagedPiece is what WriteBundle returns for a piece NewBundlePiece
// cannot have made (wrong size, or not ended by a sync flush).
var errDamagedPiece = errors.New("not a bundle piece (damaged or not made by NewBundlePiece)")

// WriteBundle writes the bundle (BundleMediaType) made of pieces, in the
// order given: the caller passes them sorted by file name, bytewise, as
// BuildBundle sorts files, and with no name twice (pieces do not carry their
// names, so WriteBundle cannot check). The bytes are a 10-byte gzip header
// (no name, no modification time, operating system 255), the pieces, one
// constant final piece holding the tar end-of-archive marker (two 512-byte
// zero blocks) in a final DEFLATE block, and the gzip trailer: the CRC-32
// combined from the pieces' CRC-32s and lengths, with no second pass over
// the data, and the length. It is one gzip member. w receives one Write per
// piece; wrap it in a bufio.Writer if writes are costly.
//
// Cost: linear in the bundle's size, but cheap next to rendering and
// compressing its documents. BenchmarkWriteBundle10000 assembles 10,000
// pieces of a realistic deployment (an 8.4 MB bundle) into sha256, the
// digest a gateway client's publication pays, in about 25 ms (about 350
// MB/s; up to 50 ms while the machine was busy), and into io.Discard in
// about 6.5 ms, the CRC-32 combination (under 1 µs per piece); compressing
// those 10,000 pieces costs about 0.5 s of CPU (go1.26.8 on the 2-core
// development machine, shared with other work: rough figures).
//
// Returns the number of bytes written. Returns EINVALID with type
// ProblemEmptyBundle if pieces is empty (Margo never serves an empty
// archive), an internal error if a piece is damaged, and w's error.
func WriteBundle(w io.Writer, pieces []BundlePiece) (int64, error) {
	if len(pieces) == 0 {
		return 0, emptyBundleError()
	}
	for i, p := range pieces {
		if p.Size < tarBlockSize || p.Size%tarBlockSize != 0 || !bytes.HasSuffix(p.Deflate, syncFlushMarker) {
			return 0, fmt.Errorf("margo: bundle piece %d of %d: %w", i+1, len(pieces), errDamagedPiece)
		}
	}
	var n int64
	write := func(b []byte) error {
		m, err := w.Write(b)
		n += int64(m)
		if err != nil {
			return fmt.Errorf("margo: write bundle: %w", err)
		}
		return nil
	}
	if err := write(bundleGzipHeader[:]); err != nil {
		return n, err
	}
	var crc uint32 // CRC-32 of the empty string
	var size int64
	for _, p := range pieces {
		if err := write(p.Deflate); err != nil {
			return n, err
		}
		crc = crc32Combine(crc, p.CRC32, p.Size)
		size += p.Size
	}
	if err := write(bundleEndPiece); err != nil {
		return n, err
	}
	crc = crc32Combine(crc, bundleEndCRC32, bundleEndSize)
	size += bundleEndSize
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(size)) // ISIZE: the length modulo 2^32
	return n, write(trailer[:])
}

// AssembleBundle is WriteBundle into memory: it returns the bundle made of
// pieces, with the same errors.
func AssembleBundle(pieces []BundlePiece) ([]byte, error) {
	var size int
	for _, p := range pieces {
		size += len(p.Deflate)
	}
	var buf bytes.Buffer
	buf.Grow(len(bundleGzipHeader) + size + len(bundleEndPiece) + 8)
	if _, err := WriteBundle(&buf, pieces); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func emptyBundleError() error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemEmptyBundle,
		Message: "a bundle needs at least one file: Margo never serves an empty archive (the manifest's bundle is null instead)"}
}

// CRC-32 combination. Go's hash/crc32 has none, and no well-kept module
// offers it: klauspost/compress (v1.20.4) has no CRC-32 code of its own, and
// github.com/dsnet/golib/hashmerge has had no commit since 2017. So it is
// written here, after zlib's crc32_combine (1.2.12 and later): appending
// len2 bytes to a message multiplies its CRC register by x^(8·len2) modulo
// the CRC polynomial, so
//
//	crc(A||B) = crc(A)·x^(8·len(B)) mod p  XOR  crc(B).
//
// The power is built from x^(2^k) mod p by square-and-multiply: about
// log2(len2) products of 32 steps each, instead of the older matrix method's
// 32×32 matrix squarings per call, which would cost far more over 10,000
// pieces. Polynomials are in CRC-32's reflected bit order: bit 31 is x^0.

// crcPolyReflected is the IEEE CRC-32 polynomial, reflected (crc32.IEEE).
const crcPolyReflected = crc32.IEEE

// mulModP returns a(x)·b(x) modulo the CRC-32 polynomial.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPolyReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nModP holds x^(2^k) modulo the CRC-32 polynomial for k = 0..31; the
// order of x divides 2^32-1, so x^(2^32) = x and the table repeats.
var x2nModP = func() (t [32]uint32) {
	t[0] = 1 << 30 // x^1
	for k := 1; k < len(t); k++ {
		t[k] = mulModP(t[k-1], t[k-1])
	}
	return t
}()

// crc32Combine returns the CRC-32 (IEEE) of A||B from crc1 = CRC-32(A),
// crc2 = CRC-32(B) and len2 = len(B) >= 0.
func crc32Combine(crc1, crc2 uint32, len2 int64) uint32 {
	// p = x^(8·len2): start at x^0 and multiply in x^(2^k) for each bit of
	// len2, k starting at 3 because 8·len2 = len2·2^3.
	p := uint32(1) << 31
	for k := 3; len2 > 0; len2, k = len2>>1, k+1 {
		if len2&1 != 0 {
			p = mulModP(x2nModP[k&31], p)
		}
	}
	return mulModP(p, crc1) ^ crc2
}
