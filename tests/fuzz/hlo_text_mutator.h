// The run fuzzer's structure-aware mutator (run_fuzzer.cc): edits HLO text a token at a time so
// that most mutants still parse, and many still verify.
#pragma once

#include <string>
#include <string_view>

namespace weave::fuzz {

// One mutation of `text`, chosen by `seed`, deterministic for the same (text, seed). Tokens are
// words (names, opcodes, types, attribute names), numbers and single punctuation characters.
// The mutation is one of:
//  - a number replaced by a small one (0..4, 8, 16, -1) or by itself +-1, x2, /2;
//  - two numbers swapped;
//  - a word replaced by another word of the text, or by an opcode, element type or attribute
//    name from Weave's tables;
//  - a token deleted or repeated;
//  - a line deleted;
//  - an instruction's definition (what follows ` = `) replaced by another line's, its name kept.
// Empty when the text has nothing to mutate.
std::string MutateHloText(std::string_view text, unsigned int seed);

}  // namespace weave::fuzz
