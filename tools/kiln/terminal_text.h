// SPDX-License-Identifier: Apache-2.0
// Text from files and peers (benchmark names, error messages, function names) made safe to
// print as text: a name in a timing file or a server's message can carry ANSI escape sequences
// or other control characters that a terminal would act on (move the cursor, rewrite lines,
// change the title). JSON output needs none of this: its encoder escapes them.
#ifndef KILN_TOOLS_KILN_TERMINAL_TEXT_H_
#define KILN_TOOLS_KILN_TERMINAL_TEXT_H_

#include <string>
#include <string_view>

namespace kiln::tool {

// `text` with every control character written out: C0 controls (ESC, newline, tab, ...) and
// DEL as \xNN, C1 controls (U+0080-U+009F, among them the 8-bit CSI) as \u00NN, and bytes that
// are not valid UTF-8 as \xNN. Printable characters, UTF-8 ones included, are unchanged.
std::string printable(std::string_view text);

// The same, but line breaks stay line breaks: for messages of several lines (the tool's error
// output), whose parts can come from a server or a file.
std::string printable_lines(std::string_view text);

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_TERMINAL_TEXT_H_
