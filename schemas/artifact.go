package schemas

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Artifacts are files kept in the service's object store (dwr-artifacts),
// one namespace per workspace, addressed by the SHA-256 of their bytes.
// They move through the query subjects, served by every replica:
//
//   - dwr.q.<ws>.artifact.chunk: one piece of an upload, its bytes as the
//     body (at most ArtifactChunkBytes), with headers HeaderUpload (an id the
//     uploader chose, ULID-like) and HeaderChunk (0, 1, 2…, in order);
//     answered with a Reply. A chunk sent again under the same upload and
//     index is stored once.
//   - dwr.q.<ws>.artifact.put: ArtifactPut, once every chunk is answered.
//     The service checks the chunks (in order, none missing) against the
//     size and digest given, then stores the artifact; the Reply's result is
//     its ArtifactInfo. Chunks not put within an hour are dropped.
//   - dwr.q.<ws>.artifact.get: ArtifactGet; the reply is one chunk of the
//     artifact, its bytes as the body, with HeaderChunkSeq (the After of the
//     next request), HeaderArtifactSize and HeaderArtifactChunks. A reply
//     without HeaderChunkSeq is a Reply holding an error. The reader checks
//     the bytes against the digest it asked for: the service's store is not
//     trusted for them.
//   - dwr.q.<ws>.artifact.info: ArtifactGet (After unused); the Reply's
//     result is the ArtifactInfo.
const (
	// ArtifactChunkBytes bounds one chunk of an upload or a download.
	ArtifactChunkBytes = 256 << 10
	// HeaderUpload names the upload a chunk belongs to.
	HeaderUpload = "Dwr-Upload"
	// HeaderChunk is a chunk's index in its upload, from 0.
	HeaderChunk = "Dwr-Chunk"
	// HeaderChunkSeq marks a download's chunk: the position to ask after
	// for the next one.
	HeaderChunkSeq = "Dwr-Chunk-Seq"
	// HeaderArtifactSize and HeaderArtifactChunks describe the whole
	// artifact on each chunk of a download.
	HeaderArtifactSize   = "Dwr-Artifact-Size"
	HeaderArtifactChunks = "Dwr-Artifact-Chunks"
	// ArtifactRefPrefix marks a model step's input or response reference as
	// an artifact: "sha256:" and the artifact's digest.
	ArtifactRefPrefix = "sha256:"
)

// ArtifactPutTime is how long a put of size bytes may take: the service
// reads its chunks twice (checked, then stored), at 2 MiB/s at worst, after
// half a minute.
func ArtifactPutTime(size int64) time.Duration {
	return 30*time.Second + time.Duration(size/(2<<20))*time.Second
}

// ArtifactPut stores the chunks of an upload as an artifact.
type ArtifactPut struct {
	Upload string `json:"upload"`
	Chunks int    `json:"chunks"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Name and Type are how the artifact is shown (a file name, a media
	// type); the digest alone identifies it.
	Name string `json:"name,omitempty"`
	Type string `json:"type,omitempty"`
	// TaskID is the task whose attempt made the artifact, when one did.
	TaskID string `json:"task_id,omitempty"`
}

// ArtifactGet reads an artifact: its info, or the chunk after After (0:
// the first).
type ArtifactGet struct {
	SHA256 string `json:"sha256"`
	After  uint64 `json:"after,omitempty"`
}

// ArtifactInfo describes a stored artifact.
type ArtifactInfo struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	Name   string `json:"name,omitempty"`
	Type   string `json:"type,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	// StoredAt is when the artifact was first stored.
	StoredAt time.Time `json:"stored_at"`
	// Duplicate: the workspace held the artifact already; nothing was
	// stored again (ArtifactPut's reply).
	Duplicate bool `json:"duplicate,omitempty"`
}

// Ref returns the artifact's reference, as reports and verdicts carry it
// (named by its digest when it was stored without a name).
func (i ArtifactInfo) Ref() ArtifactRef {
	name := i.Name
	if name == "" {
		name = i.SHA256
	}
	return ArtifactRef{Name: name, SHA256: i.SHA256, Size: i.Size, Type: i.Type}
}

// ValidSHA256 reports whether s is a SHA-256 digest as artifacts are
// addressed: 64 lower-case hex digits.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ArtifactOfRef returns the digest a model step's input or response
// reference names when it is an artifact ("sha256:<digest>"); other
// references (a URL, a trace id) are not checked.
func ArtifactOfRef(ref string) (string, bool) {
	d, ok := strings.CutPrefix(ref, ArtifactRefPrefix)
	return d, ok
}

// NamedArtifact is an artifact a task names, and where.
type NamedArtifact struct {
	ArtifactRef
	// From says where: "attempt 2", "attempt 2 model step 1",
	// "verification of attempt 1 (FAIL)".
	From string `json:"from"`
}

// NamedArtifacts lists the artifacts t names: its attempts' artifacts and
// model steps' "sha256:" references, and its verifications' evidence.
func (t *Task) NamedArtifacts() []NamedArtifact {
	out := []NamedArtifact{}
	for _, a := range t.Attempts {
		from := "attempt " + strconv.Itoa(a.N)
		for _, r := range a.Artifacts {
			out = append(out, NamedArtifact{r, from})
		}
		for i, m := range a.ModelSteps {
			for _, ref := range []string{m.InputRef, m.ResponseRef} {
				if sha, ok := ArtifactOfRef(ref); ok {
					out = append(out, NamedArtifact{ArtifactRef{Name: ref, SHA256: sha}, fmt.Sprintf("%s model step %d", from, i+1)})
				}
			}
		}
	}
	for _, v := range t.Verifications {
		for _, r := range v.EvidenceRefs {
			out = append(out, NamedArtifact{r, fmt.Sprintf("verification of attempt %d (%s)", v.Attempt, v.Outcome)})
		}
	}
	return out
}
