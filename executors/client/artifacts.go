package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/schemas"
)

// ErrArtifactCorrupt is returned by an ArtifactReader whose bytes do not
// have the digest the artifact is addressed by (or not its size): the
// store changed them. Nothing read from it may be used.
var ErrArtifactCorrupt = errors.New("client: the artifact's bytes do not match its digest")

// ArtifactMeta describes an artifact being put; the digest alone
// identifies it.
type ArtifactMeta struct {
	// Name is how the artifact is shown: a file name, say.
	Name string
	// Type is its media type, e.g. "application/pdf".
	Type string
	// TaskID is the task whose attempt makes it, if one does.
	TaskID string
}

// PutArtifact stores the bytes r yields as an artifact of the workspace and
// returns its info (Ref gives what a report carries). The bytes stream in
// chunks of schemas.ArtifactChunkBytes: memory stays flat whatever the
// size. Bytes the workspace holds already are not stored again
// (Duplicate).
func (c *Client) PutArtifact(ctx context.Context, r io.Reader, meta ArtifactMeta) (*schemas.ArtifactInfo, error) {
	upload := ulid.Make().String()
	h := sha256.New()
	buf := make([]byte, schemas.ArtifactChunkBytes)
	var size int64
	chunks := 0
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			if err := c.putChunk(ctx, upload, chunks, buf[:n]); err != nil {
				return nil, err
			}
			chunks++
			size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("client: read the artifact: %w", err)
		}
	}
	put := schemas.ArtifactPut{Upload: upload, Chunks: chunks, Size: size, SHA256: hex.EncodeToString(h.Sum(nil)),
		Name: meta.Name, Type: meta.Type, TaskID: meta.TaskID}
	var info schemas.ArtifactInfo
	if _, err := c.query(ctx, "artifact.put", put, &info, call{timeout: max(c.timeout, schemas.ArtifactPutTime(size))}); err != nil {
		return nil, err
	}
	return &info, nil
}

func (c *Client) putChunk(ctx context.Context, upload string, i int, data []byte) error {
	m := nats.NewMsg(c.prefix + ".q." + c.ws + ".artifact.chunk")
	m.Header.Set(schemas.HeaderUpload, upload)
	m.Header.Set(schemas.HeaderChunk, strconv.Itoa(i))
	_, err := c.request(ctx, m, data, call{})
	return err
}

// ArtifactInfo returns what the workspace's store holds under the digest.
func (c *Client) ArtifactInfo(ctx context.Context, sha string) (*schemas.ArtifactInfo, error) {
	var info schemas.ArtifactInfo
	if _, err := c.query(ctx, "artifact.info", schemas.ArtifactGet{SHA256: sha}, &info, call{}); err != nil {
		return nil, err
	}
	return &info, nil
}

// GetArtifact opens the artifact stored under the digest sha. Its reader
// fetches one chunk at a time, and checks the bytes against sha as they
// pass: its last Read returns ErrArtifactCorrupt when they differ (read to
// the end before trusting what was read). Close it when done.
func (c *Client) GetArtifact(ctx context.Context, sha string) (*ArtifactReader, error) {
	if !schemas.ValidSHA256(sha) {
		return nil, &schemas.Error{Code: schemas.CodeInvalid, Message: "/sha256: must be 64 lower-case hex digits",
			Fields: []schemas.FieldError{{Pointer: "/sha256", Message: "must be 64 lower-case hex digits"}}}
	}
	r := &ArtifactReader{c: c, ctx: ctx, sha: sha, h: sha256.New()}
	if err := r.fetch(); err != nil {
		return nil, err
	}
	return r, nil
}

// ArtifactReader reads an artifact (GetArtifact).
type ArtifactReader struct {
	c     *Client
	ctx   context.Context
	sha   string
	h     hash.Hash
	size  int64 // the whole artifact's, as the store says
	total int   // its chunks
	got   int   // chunks fetched
	read  int64
	after uint64
	buf   []byte
	err   error
}

// Size is the artifact's size in bytes.
func (r *ArtifactReader) Size() int64 { return r.size }

func (r *ArtifactReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.got >= r.total {
			r.err = r.verify()
			continue
		}
		if err := r.fetch(); err != nil {
			r.err = err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the reading.
func (r *ArtifactReader) Close() error {
	if r.err == nil {
		r.err = errors.New("client: the artifact reader is closed")
	}
	return nil
}

func (r *ArtifactReader) verify() error {
	if sum := hex.EncodeToString(r.h.Sum(nil)); sum != r.sha || r.read != r.size {
		return fmt.Errorf("%w: artifact %s: read %d bytes with digest %s", ErrArtifactCorrupt, r.sha, r.read, sum)
	}
	return io.EOF
}

// fetch asks for the next chunk.
func (r *ArtifactReader) fetch() error {
	c := r.c
	body, err := json.Marshal(schemas.ArtifactGet{SHA256: r.sha, After: r.after})
	if err != nil {
		return err
	}
	m := nats.NewMsg(c.prefix + ".q." + c.ws + ".artifact.get")
	m.Data = body
	var resp *nats.Msg
	err = c.retrying(r.ctx, m.Subject, call{}, func() error {
		var err error
		if resp, err = c.exchange(r.ctx, m, 0); err != nil {
			return err
		}
		if resp.Header.Get(schemas.HeaderChunkSeq) != "" {
			return nil
		}
		rep, err := decodeReply(m.Subject, resp.Data)
		if err == nil {
			err = rep.Error
		}
		return err
	})
	if err != nil {
		return err
	}
	seq, err1 := strconv.ParseUint(resp.Header.Get(schemas.HeaderChunkSeq), 10, 64)
	size, err2 := strconv.ParseInt(resp.Header.Get(schemas.HeaderArtifactSize), 10, 64)
	total, err3 := strconv.Atoi(resp.Header.Get(schemas.HeaderArtifactChunks))
	if err := errors.Join(err1, err2, err3); err != nil || (r.got > 0 && (size != r.size || total != r.total)) || (total > 0 && seq <= r.after) {
		return &RequestError{Subject: m.Subject, Err: fmt.Errorf("the answer is not a chunk of artifact %s", r.sha)}
	}
	r.size, r.total, r.after = size, total, seq
	if total > 0 {
		r.got++
		r.buf = resp.Data
		r.h.Write(resp.Data)
		r.read += int64(len(resp.Data))
	}
	return nil
}

// SaveArtifact writes the artifact stored under sha to file: to a
// temporary file beside it first, moved in place only once every byte
// passed the digest check, so that file never holds bytes that failed it
// (the error then wraps ErrArtifactCorrupt). An error about the file wraps
// the *os.PathError.
func (c *Client) SaveArtifact(ctx context.Context, sha, file string) error {
	r, err := c.GetArtifact(ctx, sha)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("client: save artifact %s: %w", sha, err)
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("client: save artifact %s: %w", sha, err)
	}
	return nil
}
