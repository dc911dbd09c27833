package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// DefaultArtifactMaxBytes is the default bound of one artifact (Config's
// ArtifactMaxBytes): 1 GiB.
const DefaultArtifactMaxBytes = 1 << 30

// uploadMaxAge is how long the chunks of an upload wait for its put.
const uploadMaxAge = time.Hour

// The headers an artifact keeps in the object store, besides its digest.
const (
	objHeaderName = "Dwr-Name"
	objHeaderType = "Dwr-Type"
	objHeaderTask = "Dwr-Task"
	objHeaderBy   = "Dwr-Uploader"
	// headerSealed marks an upload's chunk, or an object, whose bytes are
	// sealed with its workspace's data key (encryption on).
	headerSealed = "Dwr-Sealed"
)

// ArtifactQueries are the artifact operations on the query subjects
// (dwr.q.<ws>.artifact.*): see schemas.ArtifactPut.
var ArtifactQueries = []string{"artifact.chunk", "artifact.put", "artifact.get", "artifact.info"}

// artifactStore keeps artifacts in the object store <prefix>-artifacts,
// named <workspace>/<sha256>, and the chunks of uploads in progress in the
// stream <PREFIX>_UPLOADS, on subjects <prefix>.upload.<ws>.<uploader>.<upload>
// (uploader: a digest of the uploading identity, so that one identity
// cannot add to another's upload).
type artifactStore struct {
	js       jetstream.JetStream
	obs      jetstream.ObjectStore
	objects  jetstream.Stream // the object store's stream
	uploads  jetstream.Stream
	bucket   string
	prefix   string
	maxBytes int64
	putting  sync.Map // upload subject → *sync.Mutex: the puts under way here
	// inProgress is what checkUploads knows of each workspace's uploads in
	// progress: workspace → *uploadsOf.
	inProgress sync.Map
	// reads are the two streams as the queries' connection reaches them
	// (readFrom): the chunks a put reads back and a download's come in on
	// it, not on the connection of the writer's appends. Until it is set,
	// objects and uploads serve.
	reads atomic.Pointer[artifactStreams]
	// privacy seals the bytes of chunks and objects with the workspace's
	// data key; nil when encryption is off.
	privacy *privacy
	// room bounds the bytes of each workspace's artifacts; nil: no bound.
	room *artifactRoom
}

// sealChunk returns chunk b of workspace ws as it is stored: sealed with
// the workspace's key when encryption is on (sealed reports it).
func (a *artifactStore) sealChunk(ws string, b []byte) (out []byte, sealed bool, werr *schemas.Error) {
	if a.privacy == nil {
		return b, false, nil
	}
	k, err := a.privacy.key(ws, eventstore.ScopeWorkspace, true)
	if errors.Is(err, eventstore.ErrShredded) {
		return nil, false, &schemas.Error{Code: schemas.CodeConflict, Message: shreddedMessage(ws, eventstore.ScopeWorkspace)}
	}
	if err != nil {
		return nil, false, &schemas.Error{Code: schemas.CodeUnavailable, Message: "the workspace's data key could not be read now: try again"}
	}
	return k.SealBytes(ws, eventstore.ScopeWorkspace, b), true, nil
}

// openChunk returns the bytes of a stored chunk b of workspace ws, sealed
// or not.
func (a *artifactStore) openChunk(ws string, b []byte, sealed bool) ([]byte, error) {
	if !sealed {
		return b, nil
	}
	if a.privacy == nil {
		return nil, errors.New("handlers: a sealed artifact, and encryption is off: start the service with its master key")
	}
	k, err := a.privacy.key(ws, eventstore.ScopeWorkspace, false)
	if err != nil {
		return nil, err
	}
	return k.OpenBytes(ws, eventstore.ScopeWorkspace, b)
}

func newArtifactStore(ctx context.Context, js jetstream.JetStream, cfg Config) (*artifactStore, error) {
	bucket := cfg.Prefix + "-artifacts"
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: bucket, Description: "dwr artifacts: <workspace>/<sha256>, written through the service only",
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas, MaxBytes: cfg.ArtifactStoreMaxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: artifact store: %w", err)
	}
	objects, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("handlers: artifact store: %w", err)
	}
	uploads, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: strings.ToUpper(cfg.Prefix) + "_UPLOADS", Description: "dwr: chunks of artifact uploads until they are put (dropped after an hour)",
		Subjects: []string{cfg.Prefix + ".upload.>"}, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		// No MaxBytes: JetStream reserves a stream's MaxBytes on its nodes
		// when it places it (a node with less free storage is refused).
		// Each upload is bounded (MaxMsgsPerSubject), and its chunks go
		// after MaxAge.
		MaxAge: uploadMaxAge, MaxMsgsPerSubject: cfg.ArtifactMaxBytes/schemas.ArtifactChunkBytes + 2, Discard: jetstream.DiscardNew,
		DiscardNewPerSubject: true, MaxMsgSize: schemas.ArtifactChunkBytes + 4<<10, Duplicates: 2 * time.Minute,
		// One replica: a put reads its chunks raw (a direct get), not as
		// base64 in JSON. With more, a direct get may be served by a
		// replica that has not the last chunk yet.
		AllowDirect: cfg.Replicas == 1,
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: uploads stream: %w", err)
	}
	a := &artifactStore{js: js, obs: obs, objects: objects, uploads: uploads, bucket: bucket, prefix: cfg.Prefix, maxBytes: cfg.ArtifactMaxBytes}
	if cfg.MaxArtifactBytesPerWorkspace > 0 {
		a.room = newArtifactRoom(cfg.MaxArtifactBytesPerWorkspace)
	}
	return a, nil
}

// artifactStreams are the object store's stream and the uploads' stream.
type artifactStreams struct{ objects, uploads jetstream.Stream }

// readFrom makes the chunks of puts and downloads be read on js (the
// queries' connection): a download of a large artifact then no longer
// passes through the connection that carries the writer's appends.
func (a *artifactStore) readFrom(ctx context.Context, js jetstream.JetStream) error {
	a.reads.Store(nil) // those of an earlier connection, closed since
	objects, err := js.Stream(ctx, a.objects.CachedInfo().Config.Name)
	if err != nil {
		return err
	}
	uploads, err := js.Stream(ctx, a.uploads.CachedInfo().Config.Name)
	if err != nil {
		return err
	}
	a.reads.Store(&artifactStreams{objects: objects, uploads: uploads})
	return nil
}

// readStreams returns the streams to read chunks from (readFrom).
func (a *artifactStore) readStreams() artifactStreams {
	if r := a.reads.Load(); r != nil {
		return *r
	}
	return artifactStreams{objects: a.objects, uploads: a.uploads}
}

func objectName(ws, sha string) string { return ws + "/" + sha }

// uploadSubject is where the chunks of one identity's upload wait.
func (a *artifactStore) uploadSubject(ws string, who sender, upload string) string {
	h := sha256.Sum256([]byte(who.key()))
	return a.prefix + ".upload." + ws + "." + hex.EncodeToString(h[:8]) + "." + upload
}

func invalidField(pointer, format string, args ...any) *schemas.Error {
	return toWire(&domain.Error{Code: domain.CodeInvalid, Field: pointer, Message: fmt.Sprintf(format, args...)}, nil)
}

// validUpload reports whether an upload id can stand as a subject token.
func validUpload(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// handleArtifact serves one artifact operation; its reply's headers are
// set for a download's chunk.
func (s *Service) handleArtifact(name string, req micro.Request, who sender) ([]byte, micro.Headers) {
	ws := workspaceOf(req.Subject())
	if !domain.ValidName(ws) {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid, Message: fmt.Sprintf("workspace %q in the subject is not a valid name", ws)}), nil
	}
	p, werr := s.authorize(who, ws, "q", name)
	if werr != nil {
		return errResponse(werr), nil
	}
	if name == "artifact.chunk" || name == "artifact.put" {
		// Held until the chunk is stored: a measurement before that would
		// not see it on the disk. Held before the look, so that uploads
		// arriving together each count the others'.
		defer s.disk.hold(int64(len(req.Data())))()
		if !s.disk.hasRoom() {
			// Bytes on their way in would take the disk's last room.
			return errResponse(toWire(errDiskLow, s.cfg.Logger)), nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemas.ArtifactPutTime(s.cfg.ArtifactMaxBytes))
	defer cancel()
	if name == "artifact.chunk" {
		return s.artifacts.chunk(ctx, ws, who, req), nil
	}
	body := req.Data()
	if err := schemas.CheckBounds(body, MaxQueryBytes, 4); err != nil {
		return errResponse(toWire(err, s.cfg.Logger)), nil
	}
	switch name {
	case "artifact.put":
		var put schemas.ArtifactPut
		if werr := decodeStrict(body, &put, "request"); werr != nil {
			return errResponse(werr), nil
		}
		if err := schemas.CheckNotSealed(name, body); err != nil { // its name and type are kept
			return errResponse(toWire(err, s.cfg.Logger)), nil
		}
		info, werr := s.artifacts.put(ctx, ws, who, p.name, put)
		if werr != nil {
			return errResponse(werr), nil
		}
		return okResponse(0, info), nil
	}
	var g schemas.ArtifactGet
	if werr := decodeStrict(body, &g, "request"); werr != nil {
		return errResponse(werr), nil
	}
	if !schemas.ValidSHA256(g.SHA256) {
		return errResponse(invalidField("/sha256", "must be 64 lower-case hex digits")), nil
	}
	info, werr := s.artifacts.info(ctx, ws, g.SHA256)
	if werr != nil {
		return errResponse(werr), nil
	}
	if name == "artifact.info" {
		return okResponse(0, artifactInfoOf(info, false)), nil
	}
	return s.artifacts.read(ctx, ws, info, g.After)
}

// decodeStrict decodes body into v, refusing unknown fields; what names
// the body in the refusal.
func decodeStrict(body []byte, v any, what string) *schemas.Error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &schemas.Error{Code: schemas.CodeInvalid, Message: "the " + what + " does not decode: " + err.Error()}
	}
	return nil
}

// chunk stores one chunk of an upload.
func (a *artifactStore) chunk(ctx context.Context, ws string, who sender, req micro.Request) []byte {
	h := req.Headers()
	upload := h.Get(schemas.HeaderUpload)
	if !validUpload(upload) {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid,
			Message: "header " + schemas.HeaderUpload + " must name the upload: 1 to 64 letters, digits, '-' or '_'"})
	}
	idx, err := strconv.Atoi(h.Get(schemas.HeaderChunk))
	if maxChunks := int(a.maxBytes/schemas.ArtifactChunkBytes) + 1; err != nil || idx < 0 || idx >= maxChunks {
		return errResponse(&schemas.Error{Code: schemas.CodeInvalid,
			Message: fmt.Sprintf("header %s must be the chunk's index, 0 to %d (an artifact holds at most %d bytes)", schemas.HeaderChunk, maxChunks-1, a.maxBytes)})
	}
	if n := len(req.Data()); n > schemas.ArtifactChunkBytes {
		return errResponse(&schemas.Error{Code: schemas.CodeTooLarge,
			Message: fmt.Sprintf("the chunk is %d bytes; at most %d are allowed", n, schemas.ArtifactChunkBytes)})
	}
	subject := a.uploadSubject(ws, who, upload)
	// Every chunk, not only the first: one that left out its chunk 0
	// would start an upload unchecked.
	if werr := a.checkUploads(ctx, ws, subject); werr != nil {
		return errResponse(werr)
	}
	m := nats.NewMsg(subject)
	data, sealed, werr := a.sealChunk(ws, req.Data())
	if werr != nil {
		return errResponse(werr)
	}
	m.Data = data
	if sealed {
		m.Header.Set(headerSealed, "1")
	}
	m.Header.Set(schemas.HeaderChunk, strconv.Itoa(idx))
	m.Header.Set(jetstream.MsgIDHeader, subject+"."+strconv.Itoa(idx)) // a chunk sent again is stored once
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		return errResponse(&schemas.Error{Code: schemas.CodeUnavailable,
			Message: "the chunk could not be stored now (" + err.Error() + "): send it again, or fewer uploads at once"})
	}
	return okResponse(0, map[string]int{"chunk": idx})
}

// MaxUploadsPerIdentity bounds the uploads one identity has in progress in
// a workspace (chunks sent, not yet put): with ArtifactMaxBytes, what it
// can make the service keep for an hour without storing anything.
const MaxUploadsPerIdentity = 4

// checkUploads refuses a chunk of another upload from an identity with
// MaxUploadsPerIdentity uploads in progress (subject is the chunk's
// upload's), and a chunk of workspace ws whose uploads in progress already
// hold more than its room for artifacts and one artifact besides (so that
// an upload of bytes it holds already, a duplicate, is still taken when
// it is full). It reads the workspace's uploads from JetStream at most
// once a second (uploadsStale), counting meanwhile the chunks this
// replica takes and the uploads it puts: JetStream keeps the info
// requests of the whole server in one queue, and a chunk's request asked
// one each. Chunks checked at the same moment, and those other replicas
// take within the second, may pass it together. A refusal is never made
// on what was read before the chunk came: another replica may have put
// uploads since (an identity's upload after upload, each chunk and put
// answered by any replica), so the uploads are read again first — at most
// one read at a time per workspace, shared by the chunks that came before
// it began.
func (a *artifactStore) checkUploads(ctx context.Context, ws, subject string) *schemas.Error {
	came := time.Now()
	v, _ := a.inProgress.LoadOrStore(ws, &uploadsOf{})
	u := v.(*uploadsOf)
	u.mu.Lock()
	defer u.mu.Unlock()
	if time.Since(u.read) >= uploadsStale {
		if werr := a.readUploads(ctx, ws, u); werr != nil {
			return werr
		}
	}
	werr := a.refuseChunk(ws, subject, u)
	if werr != nil && u.read.Before(came) {
		if werr = a.readUploads(ctx, ws, u); werr == nil {
			werr = a.refuseChunk(ws, subject, u)
		}
	}
	if werr != nil {
		return werr
	}
	u.chunks[subject]++ // counted as taken: a chunk refused later only counts one too many, for a second
	return nil
}

// readUploads reads ws's uploads in progress from JetStream into u, whose
// mu is held.
func (a *artifactStore) readUploads(ctx context.Context, ws string, u *uploadsOf) *schemas.Error {
	began := time.Now() // what was purged before is not counted
	info, err := a.uploads.Info(ctx, jetstream.WithSubjectFilter(a.prefix+".upload."+ws+".>"))
	if err != nil {
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the uploads in progress could not be read now (" + err.Error() + "): send the chunk again"}
	}
	u.chunks, u.read = info.State.Subjects, began
	if u.chunks == nil {
		u.chunks = map[string]uint64{}
	}
	return nil
}

// refuseChunk is checkUploads' refusal of a chunk on subject as u counts
// ws's uploads in progress, or nil. u.mu is held.
func (a *artifactStore) refuseChunk(ws, subject string, u *uploadsOf) *schemas.Error {
	mine := subject[:strings.LastIndexByte(subject, '.')+1]
	_, ongoing := u.chunks[subject]
	n, staged := 0, int64(0)
	for subj, chunks := range u.chunks {
		staged += int64(chunks) * schemas.ArtifactChunkBytes //nolint:gosec // G115: a count of chunks
		if strings.HasPrefix(subj, mine) {
			n++
		}
	}
	if !ongoing && n >= MaxUploadsPerIdentity {
		return &schemas.Error{Code: schemas.CodeConflict, Message: fmt.Sprintf(
			"%d uploads of yours are in progress in this workspace, the most allowed: put them (or let them be dropped an hour after their last chunk) before starting another", n)}
	}
	if a.room != nil {
		return a.room.stage(ws, staged, a.maxBytes)
	}
	return nil
}

// uploadsStale is how long checkUploads counts on what it read of a
// workspace's uploads in progress.
const uploadsStale = time.Second

// uploadsOf is what checkUploads knows of one workspace's uploads in
// progress: the chunks of each upload's subject, as read from JetStream
// at read and counted since.
type uploadsOf struct {
	mu     sync.Mutex
	read   time.Time
	chunks map[string]uint64
}

// purgeUpload drops the chunks of the upload on subject of workspace ws:
// it is no longer in progress.
func (a *artifactStore) purgeUpload(ctx context.Context, ws, subject string) {
	_ = a.uploads.Purge(ctx, jetstream.WithPurgeSubject(subject))
	if v, ok := a.inProgress.Load(ws); ok {
		u := v.(*uploadsOf)
		u.mu.Lock()
		delete(u.chunks, subject)
		u.mu.Unlock()
	}
}

// put checks an upload's chunks against p and stores them as an artifact
// of workspace ws.
func (a *artifactStore) put(ctx context.Context, ws string, who sender, by string, p schemas.ArtifactPut) (schemas.ArtifactInfo, *schemas.Error) {
	if werr := a.checkPut(p); werr != nil {
		return schemas.ArtifactInfo{}, werr
	}
	subject := a.uploadSubject(ws, who, p.Upload)
	// A put sent again while the first is still storing waits for it (and
	// then finds the artifact stored).
	mu, _ := a.putting.LoadOrStore(subject, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer func() {
		mu.(*sync.Mutex).Unlock()
		a.putting.Delete(subject)
	}()
	// A put the workspace has no room for is refused before its chunks are
	// read, unless the workspace holds its bytes already (a duplicate, put
	// as ever once they are checked).
	if werr := a.room.refuses(ws, p.Size); werr != nil {
		if _, ierr := a.info(ctx, ws, p.SHA256); ierr != nil {
			if ierr.Code == schemas.CodeNotFound {
				return schemas.ArtifactInfo{}, werr
			}
			return schemas.ArtifactInfo{}, ierr
		}
	}
	// The chunks are read twice: checked first, then stored, so that no
	// object under the digest ever holds other bytes.
	staged := a.staged(ws, subject, 0)
	h := sha256.New()
	n, err := io.Copy(h, staged)
	if errors.Is(err, errChunkMissing) && staged.chunks == 0 && p.Chunks == 0 {
		err = nil // an empty artifact: no chunks
	}
	sum := hex.EncodeToString(h.Sum(nil))
	existing, ierr := a.info(ctx, ws, p.SHA256)
	switch {
	case errors.Is(err, errChunkMissing) && staged.chunks == 0 && ierr == nil:
		return artifactInfoOf(existing, true), nil // put again once stored: its chunks are gone
	case err != nil:
		return schemas.ArtifactInfo{}, stagedError(err, p)
	case staged.chunks != p.Chunks:
		return schemas.ArtifactInfo{}, invalidField("/chunks", "the upload holds %d chunks, not %d: send the missing ones, then put again", staged.chunks, p.Chunks)
	case n != p.Size:
		return schemas.ArtifactInfo{}, invalidField("/size", "the upload's chunks hold %d bytes, not %d", n, p.Size)
	case sum != p.SHA256:
		a.purgeUpload(ctx, ws, subject)
		return schemas.ArtifactInfo{}, invalidField("/sha256", "the upload's bytes have digest %s, not %s: upload them again", sum, p.SHA256)
	case ierr == nil:
		a.purgeUpload(ctx, ws, subject)
		return artifactInfoOf(existing, true), nil
	case ierr.Code != schemas.CodeNotFound:
		return schemas.ArtifactInfo{}, ierr
	}
	stored := "" // the object's name, once it is
	if a.room != nil {
		done, werr := a.room.hold(ctx, ws, p.Size)
		if werr != nil {
			return schemas.ArtifactInfo{}, werr // its chunks wait (an hour) for room to be made
		}
		defer func() { done(stored) }()
	}
	meta := jetstream.ObjectMeta{Name: objectName(ws, p.SHA256), Headers: nats.Header{},
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: schemas.ArtifactChunkBytes}}
	if a.privacy != nil {
		meta.Headers.Set(headerSealed, "1")
	}
	for k, v := range map[string]string{objHeaderName: p.Name, objHeaderType: p.Type, objHeaderTask: p.TaskID, objHeaderBy: by} {
		if v != "" {
			meta.Headers.Set(k, v)
		}
	}
	again := a.staged(ws, subject, staged.last)
	again.want = staged.chunks
	var r io.Reader = again
	if p.Chunks == 0 {
		r = strings.NewReader("")
	}
	info, err := a.store(ctx, ws, meta, r)
	if err != nil {
		return schemas.ArtifactInfo{}, &schemas.Error{Code: schemas.CodeUnavailable, Message: "the artifact could not be stored now (" + err.Error() + "): put it again"}
	}
	if info.Digest != objectDigest(p.SHA256) || info.Size != uint64(p.Size) { //nolint:gosec // G115: p.Size was checked within 0..maxBytes
		// Changed between the two reads: nothing under the digest may hold
		// other bytes.
		_ = a.obs.Delete(ctx, meta.Name)
		return schemas.ArtifactInfo{}, &schemas.Error{Code: schemas.CodeConflict, Message: "the upload changed while it was stored: put it again"}
	}
	stored = meta.Name
	a.purgeUpload(ctx, ws, subject)
	return artifactInfoOf(info, false), nil
}

// store writes r's bytes as the object meta names, in the object store's
// format (as ObjectStore.Put writes it: chunks on a subject of their own,
// then the object's info), publishing one chunk at a time and waiting for
// its acknowledgment. Put publishes asynchronously, thousands of chunks in
// flight: the server's memory then grows with the artifact.
func (a *artifactStore) store(ctx context.Context, ws string, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	info := &jetstream.ObjectInfo{ObjectMeta: meta, Bucket: a.bucket, NUID: ulid.Make().String()}
	chunkSubj := "$O." + a.bucket + ".C." + info.NUID
	purge := func() { _ = a.objects.Purge(context.WithoutCancel(ctx), jetstream.WithPurgeSubject(chunkSubj)) }
	h := sha256.New()
	buf := make([]byte, schemas.ArtifactChunkBytes)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			stored := buf[:n]
			if meta.Headers.Get(headerSealed) != "" {
				var werr *schemas.Error
				if stored, _, werr = a.sealChunk(ws, stored); werr != nil {
					purge()
					return nil, werr
				}
			}
			if _, perr := a.js.Publish(ctx, chunkSubj, stored); perr != nil {
				purge()
				return nil, perr
			}
			info.Size += uint64(n)
			info.Chunks++
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			purge()
			return nil, err
		}
	}
	info.Digest = jetstream.GetObjectDigestValue(h)
	m := nats.NewMsg("$O." + a.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(meta.Name)))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	var err error
	if m.Data, err = json.Marshal(info); err == nil {
		_, err = a.js.PublishMsg(ctx, m)
	}
	if err != nil {
		purge()
		return nil, err
	}
	info.ModTime = time.Now().UTC()
	return info, nil
}

func (a *artifactStore) checkPut(p schemas.ArtifactPut) *schemas.Error {
	maxChunks := a.maxBytes/schemas.ArtifactChunkBytes + 1
	switch {
	case !validUpload(p.Upload):
		return invalidField("/upload", "must name the upload: 1 to 64 letters, digits, '-' or '_'")
	case !schemas.ValidSHA256(p.SHA256):
		return invalidField("/sha256", "must be 64 lower-case hex digits")
	case p.Size < 0 || p.Size > a.maxBytes:
		w := invalidField("/size", "is %d bytes; an artifact holds at most %d", p.Size, a.maxBytes)
		w.Code = schemas.CodeTooLarge
		return w
	case p.Chunks < 0 || int64(p.Chunks) > maxChunks:
		return invalidField("/chunks", "must be 0 to %d", maxChunks)
	case len(p.Name) > 1024 || strings.ContainsFunc(p.Name, func(r rune) bool { return r < ' ' }):
		return invalidField("/name", "must be at most 1,024 bytes, without control characters")
	case len(p.Type) > 200 || strings.ContainsFunc(p.Type, func(r rune) bool { return r < ' ' }):
		return invalidField("/type", "must be a media type: at most 200 bytes, without control characters")
	case p.TaskID != "" && !domain.ValidID(p.TaskID):
		return invalidField("/task_id", "must be a task id")
	}
	return nil
}

// errChunkMissing is wrapped by a chunkError.
var errChunkMissing = errors.New("handlers: chunk missing")

type chunkError struct{ want int }

func (e *chunkError) Error() string { return fmt.Sprintf("chunk %d missing", e.want) }
func (e *chunkError) Unwrap() error { return errChunkMissing }

// stagedError says what is wrong with an upload's chunks.
func stagedError(err error, p schemas.ArtifactPut) *schemas.Error {
	var ce *chunkError
	if errors.As(err, &ce) {
		return invalidField("/chunks", "chunk %d of upload %s is missing (an unknown upload, one older than an hour, or a chunk not answered): send it, then put again", ce.want, p.Upload)
	}
	return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the upload's chunks could not be read now (" + err.Error() + "): put it again"}
}

// stagedReader reads an upload's chunks in the order of their index, one
// message at a time: a chunk stored twice is read once, a gap is a
// chunkError, and reading ends at the subject's last chunk, or after the
// message bound when it is not 0.
type stagedReader struct {
	a       *artifactStore
	ws      string
	subject string
	bound   uint64
	// want, when not 0, is how many chunks must be read: fewer (the
	// upload dropped meanwhile) is an error, never a shorter artifact.
	want   int
	last   uint64 // the last message read
	chunks int
	buf    []byte
}

func (a *artifactStore) staged(ws, subject string, bound uint64) *stagedReader {
	return &stagedReader{a: a, ws: ws, subject: subject, bound: bound}
}

func (r *stagedReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := r.a.readStreams().uploads.GetMsg(ctx, r.last+1, jetstream.WithGetMsgSubject(r.subject))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound) && (r.chunks == 0 || r.chunks < r.want):
			return 0, &chunkError{want: r.chunks}
		case errors.Is(err, jetstream.ErrMsgNotFound), err == nil && r.bound > 0 && m.Sequence > r.bound:
			return 0, io.EOF
		case err != nil:
			return 0, err
		}
		r.last = m.Sequence
		idx, err := strconv.Atoi(m.Header.Get(schemas.HeaderChunk))
		switch {
		case err != nil || idx > r.chunks:
			return 0, &chunkError{want: r.chunks}
		case idx < r.chunks:
			continue // sent again after the stream forgot it had it
		}
		r.chunks++
		if r.buf, err = r.a.openChunk(r.ws, m.Data, m.Header.Get(headerSealed) != ""); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// info returns the stored artifact's object info, or not_found.
func (a *artifactStore) info(ctx context.Context, ws, sha string) (*jetstream.ObjectInfo, *schemas.Error) {
	info, err := a.obs.GetInfo(ctx, objectName(ws, sha))
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, &schemas.Error{Code: schemas.CodeNotFound,
			Message: fmt.Sprintf("artifact %s is not in workspace %q: upload it first (dwr artifact put, Job.PutArtifact)", sha, ws)}
	case err != nil:
		return nil, &schemas.Error{Code: schemas.CodeUnavailable, Message: "the artifact store could not be read now (" + err.Error() + "): try again"}
	}
	return info, nil
}

// read answers one chunk of an artifact: the first after stream position
// after.
func (a *artifactStore) read(ctx context.Context, ws string, info *jetstream.ObjectInfo, after uint64) ([]byte, micro.Headers) {
	h := micro.Headers{}
	h[schemas.HeaderArtifactSize] = []string{strconv.FormatUint(info.Size, 10)}
	h[schemas.HeaderArtifactChunks] = []string{strconv.FormatUint(uint64(info.Chunks), 10)}
	if info.Chunks == 0 {
		h[schemas.HeaderChunkSeq] = []string{"0"}
		return nil, h
	}
	m, err := a.readStreams().objects.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject("$O."+a.bucket+".C."+info.NUID))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return errResponse(&schemas.Error{Code: schemas.CodeInternal,
			Message: fmt.Sprintf("the store holds no chunk of artifact %s after position %d: it is damaged (upload the artifact again)", info.Name, after)}), nil
	case err != nil:
		return errResponse(&schemas.Error{Code: schemas.CodeUnavailable, Message: "the artifact store could not be read now (" + err.Error() + "): try again"}), nil
	}
	data, err := a.openChunk(ws, m.Data, info.Headers.Get(headerSealed) != "")
	switch {
	case errors.Is(err, eventstore.ErrShredded):
		return errResponse(&schemas.Error{Code: schemas.CodeConflict, Message: fmt.Sprintf("artifact %s: %s", info.Name, shreddedWhat(ws, eventstore.ScopeWorkspace))}), nil
	case err != nil:
		return errResponse(toWire(err, nil)), nil
	}
	h[schemas.HeaderChunkSeq] = []string{strconv.FormatUint(m.Sequence, 10)}
	return data, h
}

// objectDigest is how the object store writes a SHA-256 digest.
func objectDigest(sha string) string {
	b, _ := hex.DecodeString(sha)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(b)
}

// artifactInfoOf describes a stored object; duplicate says a put found it
// stored already.
func artifactInfoOf(o *jetstream.ObjectInfo, duplicate bool) schemas.ArtifactInfo {
	_, sha, _ := strings.Cut(o.Name, "/")
	i := schemas.ArtifactInfo{Duplicate: duplicate, SHA256: sha, Size: int64(min(o.Size, math.MaxInt64)), Chunks: int(o.Chunks), StoredAt: o.ModTime.UTC()} //nolint:gosec // G115: bounded just before
	if o.Headers != nil {
		i.Name, i.Type, i.TaskID = o.Headers.Get(objHeaderName), o.Headers.Get(objHeaderType), o.Headers.Get(objHeaderTask)
	}
	return i
}

// checkArtifacts refuses a command that names an artifact its workspace's
// store does not hold (or holds with another size): a report's artifacts,
// a verdict's evidence, a model step's "sha256:" input or response.
func (s *Service) checkArtifacts(ctx context.Context, ws string, cmd domain.Command) *schemas.Error {
	refs := artifactRefs(cmd)
	seen := map[string]*jetstream.ObjectInfo{}
	for _, r := range refs {
		if !schemas.ValidSHA256(r.sha) {
			return invalidField(r.pointer, "names an artifact by %q: an artifact's digest is 64 lower-case hex digits", r.sha)
		}
		info, ok := seen[r.sha]
		if !ok {
			var werr *schemas.Error
			if info, werr = s.artifacts.info(ctx, ws, r.sha); werr != nil && werr.Code != schemas.CodeNotFound {
				return werr
			}
			seen[r.sha] = info
		}
		switch {
		case info == nil:
			return invalidField(r.pointer, "artifact %s is not in workspace %q: upload it first (Job.PutArtifact, dwr artifact put), then report", r.sha, ws)
		case r.size > 0 && uint64(r.size) != info.Size: //nolint:gosec // G115: r.size > 0
			return invalidField(strings.TrimSuffix(r.pointer, "sha256")+"size", "is %d, but artifact %s holds %d bytes", r.size, r.sha, info.Size)
		}
	}
	return nil
}

// artifactRef is an artifact a command names, at its field.
type artifactRef struct {
	pointer, sha string
	size         int64
}

func artifactRefs(cmd domain.Command) []artifactRef {
	var refs []artifactRef
	arts := func(field string, as []schemas.ArtifactRef) {
		for i, a := range as {
			refs = append(refs, artifactRef{fmt.Sprintf("%s/%d/sha256", field, i), a.SHA256, a.Size})
		}
	}
	steps := func(ms []schemas.ModelStep) {
		for i, m := range ms {
			for _, r := range [][2]string{{"input_ref", m.InputRef}, {"response_ref", m.ResponseRef}} {
				if sha, ok := schemas.ArtifactOfRef(r[1]); ok {
					refs = append(refs, artifactRef{fmt.Sprintf("/model_steps/%d/%s", i, r[0]), sha, 0})
				}
			}
		}
	}
	switch c := cmd.(type) {
	case *domain.ReportSuccess:
		arts("/artifacts", c.Artifacts)
		steps(c.ModelSteps)
	case *domain.ReportFailure:
		steps(c.ModelSteps)
	case *domain.RecordVerification:
		arts("/evidence_refs", c.EvidenceRefs)
	}
	return refs
}

// DefaultArtifactRetention is how long the unreferenced artifacts of an
// ended goal are kept (Config's ArtifactRetention): a week.
const DefaultArtifactRetention = 7 * 24 * time.Hour

// SweptArtifact is an artifact SweepArtifacts removed.
type SweptArtifact struct {
	Workspace, SHA256, Name, TaskID, GoalID string
	Size                                    int64
}

// SweepArtifacts removes the artifacts made by a task (their put named it)
// that no task of their workspace names — in an attempt's artifacts or
// model steps, or a verification's evidence — once the task's goal (a
// standalone task: the task) ended more than Config.ArtifactRetention ago.
// An artifact a task names, or that no task made (dwr artifact put), is
// never removed. The writer sweeps every hour; each removal is logged.
func (s *Service) SweepArtifacts(ctx context.Context) ([]SweptArtifact, error) {
	if s.cfg.ArtifactRetention < 0 || s.artifacts == nil {
		return nil, nil
	}
	infos, err := s.artifacts.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("handlers: list the artifacts: %w", err)
	}
	now := s.cfg.Clock()
	named := map[string]map[string]bool{} // workspace → digests its tasks name
	var swept []SweptArtifact
	for _, info := range infos {
		ws, sha, _ := strings.Cut(info.Name, "/")
		taskID := ""
		if info.Headers != nil {
			taskID = info.Headers.Get(objHeaderTask)
		}
		ended, goalID, err := s.endedAt(taskID)
		if err != nil {
			return swept, err
		}
		if ended.IsZero() || now.Sub(ended) < s.cfg.ArtifactRetention {
			continue
		}
		if named[ws] == nil {
			if named[ws], err = s.namedArtifacts(ws); err != nil {
				return swept, err
			}
		}
		if named[ws][sha] {
			continue
		}
		if err := s.artifacts.obs.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return swept, fmt.Errorf("handlers: remove artifact %s: %w", info.Name, err)
		}
		a := SweptArtifact{Workspace: ws, SHA256: sha, Name: info.Headers.Get(objHeaderName), TaskID: taskID, GoalID: goalID, Size: artifactInfoOf(info, false).Size}
		swept = append(swept, a)
		s.cfg.Logger.Info("handlers: removed an artifact no task names, made for a goal that ended", "workspace", ws,
			"sha256", sha, "name", a.Name, "task", taskID, "goal", goalID, "size", a.Size, "ended", ended)
	}
	return swept, nil
}

// endedAt returns when the goal of task id ended (a standalone task: the
// task), zero when it has not, or when the task is unknown.
func (s *Service) endedAt(taskID string) (time.Time, string, error) {
	if taskID == "" {
		return time.Time{}, "", nil
	}
	t, err := s.store.Task(taskID)
	if err != nil || t == nil {
		return time.Time{}, "", err
	}
	if t.GoalID == "" {
		if !domain.Terminal(t.State) {
			return time.Time{}, "", nil
		}
		return t.UpdatedAt, "", nil
	}
	g, err := s.store.Goal(t.GoalID)
	if err != nil || g == nil || g.State == schemas.GoalStateOpen {
		return time.Time{}, t.GoalID, err
	}
	return g.UpdatedAt, t.GoalID, nil
}

// namedArtifacts returns the digests the tasks of workspace ws name.
func (s *Service) namedArtifacts(ws string) (map[string]bool, error) {
	named := map[string]bool{}
	err := s.store.EachTask(ws, projections.TaskFilter{}, func(t *domain.Task) bool {
		for _, a := range t.NamedArtifacts() {
			named[a.SHA256] = true
		}
		return true
	})
	return named, err
}

// artifactSweep is how often the writer sweeps the artifact store.
const artifactSweep = time.Hour

// sweepLoop sweeps the artifact store every artifactSweep while ctx lasts.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(artifactSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.SweepArtifacts(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("handlers: sweeping the artifact store failed; will try again", "err", err)
		}
		if _, err := s.SweepRetention(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("handlers: shredding the goals past their retention failed; will try again", "err", err)
		}
	}
}
