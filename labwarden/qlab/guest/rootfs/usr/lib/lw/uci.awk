# UCI file -> shell assignments, for `eval` (one process per file instead of one per option):
#   <p>_S='sec1 sec2 ...'   sections in file order
#   <p>_T_<sec>='type'      each section's type
#   <p>_<sec>_<opt>='value' each option
# Section and option names are identifiers ([A-Za-z0-9_]); values may hold anything but newlines.
function q(s) { gsub(/\047/, "\047\\\047\047", s); return "\047" s "\047" }
function unquote(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); if (s ~ /^\047.*\047$/ || s ~ /^".*"$/) s = substr(s, 2, length(s) - 2); return s }
$1 == "config" {
    sec = unquote($3); if (sec == "") sec = "cfg" NR
    secs = secs (secs == "" ? "" : " ") sec
    print p "_T_" sec "=" q(unquote($2))
    next
}
$1 == "option" && sec != "" {
    name = $2; line = $0
    sub(/^[ \t]*option[ \t]+[A-Za-z0-9_]+[ \t]*/, "", line)
    print p "_" sec "_" name "=" q(unquote(line))
}
END { print p "_S=" q(secs) }
