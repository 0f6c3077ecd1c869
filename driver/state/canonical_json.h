// Reading the state files without building a JSON tree of them.
//
// Every start reads the whole state: with 10,000 prepared claims, 33 MB of JSON, most of it the
// claims' answers and CDI specs, which start only keeps as text (JsonText). Parsing them into trees
// and printing the trees back was most of the start's instructions. The files are written in
// canonical form (CanonicalText: compact, keys sorted), so a value of a file in that form is
// already the text JsonText would make of it.
//
// ScanCanonical accepts exactly the texts that are the canonical form of a JSON value it can
// prove so cheaply: compact, object keys strictly increasing and without escapes, integers of at
// most 18 digits and no other numbers, strings in valid UTF-8 escaped as the canonical printer
// escapes them. Anything else (a float, a key with an escape, whitespace, ...) is refused, and the
// caller takes the full parser, whose answer is authoritative: the fast path only ever accepts
// what the full parser accepts and decodes it the same way (checked by checkpoint_fuzz).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace topodra::state::canonical {

// The length of the canonical JSON value at the start of `text`, or 0 when it does not start with
// one (or nests deeper than `max_depth` arrays and objects).
size_t ScanCanonical(absl::string_view text, int max_depth);

// One member of an object (its key without quotes) or element of an array (key ""), and how deep
// it is: the members or elements of the outermost value are at depth 1.
struct Piece {
  int depth = 0;
  absl::string_view key;
  absl::string_view value;
};
// ScanCanonical that also lists the members and elements at depth 1 to `record_depth`, in the
// order of the text (a container before what is in it). One pass over the text both checks it
// and splits it: splitting again after the check (ObjectMembers, ArrayElements) read the large
// strings of a state file twice more. When it refuses the text (returns 0), `pieces` is empty.
size_t ScanCanonicalPieces(absl::string_view text, int max_depth, int record_depth,
                           std::vector<Piece>* pieces);
// One past the last piece inside pieces[i]: the pieces i+1 to PieceEnd - 1 are everything
// inside it, at every deeper level (its members or elements, theirs, ... down to record_depth),
// and PieceEnd is the next piece not deeper than it (or pieces.size()).
size_t PieceEnd(const std::vector<Piece>& pieces, size_t i);

// The members of an object (each key without its quotes, and its value's text) and the elements
// of an array, for text ScanCanonical accepted as a whole already (it is not checked again: one
// pass checks the whole file, these only split it). False when it is not an object, an array.
using Members = std::vector<std::pair<absl::string_view, absl::string_view>>;
bool ObjectMembers(absl::string_view object, Members* out);
bool ArrayElements(absl::string_view array, std::vector<absl::string_view>* out);

// The contents of a canonical string without escapes ("\"abc\"" -> "abc"), or false.
bool PlainString(absl::string_view value, absl::string_view* out);

// The contents of a canonical string with its escapes undone ("\"a\\nb\"" -> "a", newline, "b"),
// or false for a text the canonical printer does not write (\/, \u0041, a cut escape).
bool UnescapedString(absl::string_view value, std::string* out);

}  // namespace topodra::state::canonical
