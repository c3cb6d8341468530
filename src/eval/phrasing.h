// Composing retrieval prompts from phrasing parts (internal to eval/): placeholder substitution and the
// placeholder check load_phrasing_parts applies to every part.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace minimakv::eval::detail {

using FrameVars = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// `frame` with every {name} replaced by its value in `vars`; throws std::invalid_argument on a name not in
// `vars` or an unclosed brace.
std::string fill_frame(std::string_view frame, FrameVars vars);

}  // namespace minimakv::eval::detail
