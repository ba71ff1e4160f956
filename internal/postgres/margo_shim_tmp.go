package postgres

// TEMPORARY: the piece helper's internal/margo API (branch i11-piece), coded
// against its agreed signatures until that branch is merged. Deleted at the
// merge.

import (
	"archive/tar"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"time"

	"github.com/wfm-dev/wfm/internal/margo"
)

type shimBundlePiece struct {
	Deflate []byte
	CRC32   uint32
	Size    int64
}

type shimManifestDocument struct {
	DeploymentID, Digest string
	SizeBytes            int64
}

func shimBundleFileName(id string) string { return id + ".yaml" }

func shimDeflate(raw []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	_, _ = w.Write(raw)
	_ = w.Flush()
	return b.Bytes()
}

func shimNewBundlePiece(name string, data []byte) (shimBundlePiece, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}); err != nil {
		return shimBundlePiece{}, err
	}
	if _, err := tw.Write(data); err != nil {
		return shimBundlePiece{}, err
	}
	if err := tw.Flush(); err != nil {
		return shimBundlePiece{}, err
	}
	return shimBundlePiece{Deflate: shimDeflate(raw.Bytes()), CRC32: crc32.ChecksumIEEE(raw.Bytes()), Size: int64(raw.Len())}, nil
}

func shimWriteBundle(w io.Writer, pieces []shimBundlePiece) (int64, error) {
	if len(pieces) == 0 {
		return 0, errors.New("empty bundle")
	}
	var out bytes.Buffer
	out.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255})
	crc := crc32.NewIEEE()
	var size int64
	for _, p := range pieces {
		out.Write(p.Deflate)
		r := flate.NewReader(bytes.NewReader(p.Deflate))
		n, _ := io.Copy(crc, r)
		if n != p.Size {
			return 0, errors.New("shim: piece size")
		}
		size += p.Size
	}
	end := make([]byte, 1024)
	out.Write(shimDeflate(end))
	crc.Write(end)
	size += 1024
	out.Write([]byte{0x03, 0x00})
	var tr [8]byte
	binary.LittleEndian.PutUint32(tr[:4], crc.Sum32())
	binary.LittleEndian.PutUint32(tr[4:], uint32(size))
	out.Write(tr[:])
	n, err := w.Write(out.Bytes())
	return int64(n), err
}

func shimAssembleBundle(pieces []shimBundlePiece) ([]byte, error) {
	var b bytes.Buffer
	_, err := shimWriteBundle(&b, pieces)
	return b.Bytes(), err
}

func shimManifestJSON(version uint64, docs []shimManifestDocument, bundleDigest string, bundleSize int64) ([]byte, error) {
	type ref struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		SizeBytes int64  `json:"sizeBytes"`
		URL       string `json:"url"`
	}
	type dep struct {
		DeploymentID string `json:"deploymentId"`
		Digest       string `json:"digest"`
		SizeBytes    int64  `json:"sizeBytes"`
		URL          string `json:"url"`
	}
	doc := struct {
		ManifestVersion uint64 `json:"manifestVersion"`
		Bundle          *ref   `json:"bundle"`
		Deployments     []dep  `json:"deployments"`
	}{ManifestVersion: version, Deployments: []dep{}}
	for _, d := range docs {
		doc.Deployments = append(doc.Deployments, dep{d.DeploymentID, d.Digest, d.SizeBytes, margo.DeploymentURL(d.DeploymentID, d.Digest)})
	}
	if len(docs) > 0 {
		doc.Bundle = &ref{margo.BundleMediaType, bundleDigest, bundleSize, margo.BundleURL(bundleDigest)}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return append(out, '\n'), err
}
