// Reads WebDataset tar shards: the members of a tar (ustar, POSIX pax, GNU long names; plain or
// gzipped) grouped into samples as webdataset 1.0.2 groups them (tariterators.py), each sample
// handed on as one tf.train.Example (formats/record_reader.h).
//
// Grouping: a member's name splits into a sample key and an extension as base_plus_ext's regular
// expression splits it (SplitSampleName: mostly at the first dot of the last path component, so
// "a.b/c.seg.png" is key "a.b/c", extension "seg.png"); consecutive members with the same key
// form one sample; extensions are compared lower-cased. Skipped, as webdataset skips them:
// members that are not regular files (directories, links, devices), metadata ("__x__" at the top
// level, anything under a "__x__/" folder) and names the expression does not match (e.g. no dot
// in the last component, or a name that starts with a dot). They do not end the sample around
// them. Two members of one sample with the same extension are the sample's error (webdataset
// raises on them).
//
// A sample's Example: the image member (jpg, else jpeg, else png, else webp) under the image key,
// the `cls` member (an ASCII integer, surrounding whitespace allowed) as an int64 under the label
// key, the key itself as bytes under "__key__", and every other member as bytes under its extension
// (json included, unparsed). The image or label key may be an extension (image_key "jpg") as
// long as no other member than the image (or the cls) would be written under it. Features come
// in the members' order, then __key__ and the label: each payload is read straight into its
// place in the record handed on, so a sample is held once. What a sample holds is counted as
// its members' data and names plus a fixed cost a member; over max_held_record_bytes it is
// refused. With no label key (unlabeled records) `cls` is not parsed: it rides along as bytes
// under "cls" like any other member.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/compression.h"
#include "formats/example_builder.h"
#include "formats/file.h"
#include "formats/record_reader.h"
#include "formats/record_reader_factory.h"
#include "formats/status.h"
#include "formats/stream_buffer.h"

namespace sluice {

inline constexpr size_t kTarBlockBytes = 512;
// The feature that holds a sample's key (webdataset's "__key__").
inline constexpr std::string_view kSampleKeyFeature = "__key__";

// webdataset's base_plus_ext: (key, extension) of a member name, the extension not lower-cased;
// nullopt where its regular expression does not match (the member is then skipped).
std::optional<std::pair<std::string_view, std::string_view>> SplitSampleName(std::string_view name);
// Whether webdataset skips the member as metadata: "__x__" at the top level, or a name under a
// "__x__/" folder at the top.
bool IsSampleMetadataName(std::string_view name);

// A tar's compression from its first bytes: gzip when they are the gzip magic, else none (a
// zlib header's two bytes are also a plausible start of a member's name).
Result<Compression> DetectTarCompression(const std::string& path);

// A regular member of a sample, where its data lies in the (uncompressed) stream.
struct TarSampleMember {
  std::string name;
  size_t key_size = 0;       // name = key "." extension
  uint64_t data_offset = 0;  // its first data byte, after its header block(s)
  uint64_t size = 0;         // data bytes
  std::string_view extension() const { return std::string_view(name).substr(key_size + 1); }
  // One past its data's padding: where the next header can start.
  uint64_t padded_end() const {
    return data_offset + (size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
  }
};

// Not thread-safe: one reader per thread.
class TarSampleReader final : public RecordReader {
 public:
  // Opens path: inflated when options.stream.compression says so or, when it is not set, when
  // the file starts with the gzip magic. stream.start_offset (plain files only) must be the first
  // header of a sample. Errors name the path.
  static Result<std::unique_ptr<TarSampleReader>> Open(const std::string& path,
                                                       const RecordReaderOptions& options);
  // Reads an already opened (and inflated) stream; `compressed` only changes how offsets are
  // written in errors ("<file>:<offset> (uncompressed)").
  TarSampleReader(std::unique_ptr<SequentialFile> file, const RecordReaderOptions& options,
                  bool compressed = false);

  TarSampleReader(const TarSampleReader&) = delete;
  TarSampleReader& operator=(const TarSampleReader&) = delete;

  // On OK: *record holds the next sample's Example, or *end_of_file at the end of the archive
  // (its zero block, or the end of the file at a block boundary after a complete member, as
  // Python's tarfile accepts it, then with a warning(); an empty file has no samples). Errors name
  // "<file>:<offset>" of the header or member at fault; record_offset() is the sample's:
  //  - InvalidArgument: the sample is readable but wrong (a `cls` that is not an integer, two
  //    members with one extension, a member written under the image or label key where the
  //    image or the label goes, a GNU sparse member). The next call reads the sample after it.
  //  - ResourceExhausted: the sample (its members' data and names, a fixed cost a member, or
  //    the Example built from them) is over max_held_record_bytes; its payloads were read
  //    through, not held, and the next call reads the sample after it.
  //  - DataLoss: a header with a bad checksum or an unreadable size, an extended header that
  //    does not parse, a header or member (or its padding) cut short by the end of the file. A
  //    tar has no resynchronization point, so this is final: every later call returns it (see
  //    can_continue()). Damage in the header after a sample's last member is that sample's
  //    error: the sample may have had more members.
  //  - I/O errors from the file, also final.
  Status ReadRecordInto(std::string* record, bool* end_of_file) override;
  // ReadRecordInto for a sample nobody wants: the same checks and errors, payloads skipped (by
  // seeking where the file can) except a `cls`.
  Status SkipRecord(bool* end_of_file) override;

  // The offset of the sample's first header (its first member's first extended header, if any),
  // in the uncompressed stream.
  uint64_t record_offset() const override { return record_offset_; }
  // The sample's member bytes (their data, without headers or padding), as far as read.
  uint64_t record_length() const override { return record_length_; }
  // With options.keep_tar_members: the members of the sample last read or skipped, in stream
  // order; all of them (members_kept()) after any call that returned OK or an error that
  // can_continue() (a sample refused or wrong is still read through to its end), unless their
  // names and a fixed cost a member come to more than max_held_record_bytes: then none (the
  // sample is refused, and holds nothing). Without the option: none.
  const std::vector<TarSampleMember>& members() const { return members_; }
  bool members_kept() const { return members_kept_; }
  // After any call that returned OK or an error that can_continue(): one past the padding of the
  // sample's last member's data, where the next sample's headers can start.
  uint64_t record_end() const { return record_end_; }
  // After a SkipRecord that returned OK: the bytes of the Example that reading the sample would
  // have handed on (what ReadRecordInto's record would hold).
  uint64_t skipped_example_bytes() const { return example_bytes_; }
  bool can_continue() const override { return final_status_.ok(); }
  // After the end: "no end-of-archive marker: ..." when the file ended between two members
  // without the marker every tar writer puts there (a shard that may have been cut short; its
  // samples up to there were read as usual).
  std::string warning() const override;
  // Bytes of the stream consumed so far.
  uint64_t offset() const { return offset_; }
  const std::string& name() const { return file_->name(); }

 private:
  // A regular member whose headers were read; its data comes next in the stream.
  struct Member {
    std::string name;
    size_t key_size = 0;         // name = key "." extension
    uint64_t header_offset = 0;  // its first header (extended ones included)
    uint64_t data_offset = 0;
    uint64_t size = 0;
    bool sparse = false;  // GNU sparse: its data is a map and fragments, not the file
    std::string_view key() const { return std::string_view(name).substr(0, key_size); }
    std::string_view extension() const { return std::string_view(name).substr(key_size + 1); }
  };
  // A member's data, laid in the record in stream order.
  struct Part {
    const std::string* extension = nullptr;  // in the sample's set of extensions
    size_t size = 0;
  };

  Status Next(std::string* record, bool skip, bool* end_of_file);
  // Reads headers up to the next member that belongs to a sample (skipping the others and
  // their data) into *m; *end at the end of the archive.
  Status NextMember(Member* m, bool* end);
  // Makes the next n <= buf_.capacity() bytes contiguous at buf_.data(); returns how many are
  // there (< n only at the end of the file). Asks the file for no more than n when sparse_.
  Result<size_t> Fill(size_t n);
  // Consumes the next n bytes: appended to *to, or dropped when to is null (seeking over them
  // where the file can, when sparse_ or they are more than a buffer). Returns how many there
  // were (< n only at the end of the file).
  Result<uint64_t> Consume(uint64_t n, std::string* to);
  // Consumes a member's n data bytes and its padding; DataLoss naming it when cut short.
  Status ConsumeData(const Member& m, uint64_t n, std::string* to);
  std::string Where(uint64_t offset) const;
  Status Fail(Status s);
  // An upper bound on the bytes the Example adds around parts_ (keys, tags, lengths).
  size_t FramingBytes(size_t key_size) const;
  // Capacity for n bytes in *record, grown geometrically but not past max_held_record_bytes.
  void Reserve(std::string* record, size_t n) const;

  std::unique_ptr<SequentialFile> file_;
  RecordReaderOptions options_;
  bool compressed_ = false;
  // file_, when it is a plain file that seeks over bytes nobody wants (Open's).
  class SeekableFile* seekable_ = nullptr;
  StreamBuffer buf_;               // never grows: Fill asks for at most its capacity
  bool sparse_ = false;            // reading a skipped sample of a seekable file: no read-ahead
  bool archive_end_ = false;       // the end marker or the end of the file was read
  uint64_t offset_ = 0;            // stream offset of buf_.data()
  std::optional<Member> pending_;  // read ahead: the first member of the next sample
  std::vector<Part> parts_;
  ExampleBuilder builder_;
  uint64_t record_offset_ = 0;
  uint64_t record_length_ = 0;
  uint64_t example_bytes_ = 0;
  std::vector<TarSampleMember> members_;  // of the last sample, when keep_tar_members
  bool members_kept_ = false;
  uint64_t record_end_ = 0;
  Status final_status_;
  // The archive ended at a block boundary without its end-of-archive marker, at this offset.
  std::optional<uint64_t> unmarked_end_;
};

}  // namespace sluice
