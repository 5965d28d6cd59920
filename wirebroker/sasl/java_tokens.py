"""Java's java.io.StreamTokenizer as both JAAS parsers set it up: Kafka's JaasConfig (a
`sasl.jaas.config` value, `settings.parse_jaas_config`) and the JDK 17's ConfigFile (a JAAS file,
`jaas_file`). The two differ only in the characters a word may hold (`KAFKA_WORD_CHARS`,
`JDK_WORD_CHARS`); which tokens each takes where is its parser's business.

- Blanks are the characters up to the space, line breaks included.
- A word starts with a letter (ASCII, or any character from U+00A0 on) or one of the parser's
  word characters, and goes on over those, the digits, `.` and `-`.
- A number is digits with at most one `.` (`1`, `1.5`, `.5`, `.`), or `-` and one (a `-` before
  anything else is a character of its own). It has no text: neither parser takes it as a name
  or a value, so `debug=1` has no value and `2fa=x` is a number before a word.
- A quoted string, between `"` or between `'`, ends at its quote, at a line break (which is not
  part of it) or at the end of the input. In it `\\a \\b \\t \\n \\v \\f \\r` are those control
  characters, a backslash and 1 to 3 octal digits the character of that code (three only when
  the first is 0-3: `\\101` is `A`, `\\477` is `\\047` and `7`), a backslash before any other
  character that character (a line break included), and a backslash at the very end U+FFFF.
- `/*` to the next `*/` is a comment (unclosed: the input ends there); `//`, and a `/` followed by
  any other character, is a comment to the end of the line (the character after the `/` is
  skipped first, even if it is a line break).
- Any other character is a token of its own (`=`, `;`, `{`, `}`, `,`, `:` ...).
"""

from __future__ import annotations

#: The word characters Kafka's JaasConfig adds to StreamTokenizer's letters (`-` also starts a
#: number, so it begins no word).
KAFKA_WORD_CHARS = "-_$"
#: The word characters the JDK's ConfigFile adds.
JDK_WORD_CHARS = "$_-*"

WORD = "word"
NUMBER = "number"
END = "end"
#: The kinds of a token: WORD, NUMBER, END, the quote of a quoted string (`"` or `'`), or the
#: character itself.
Token = tuple[str, str | None, int]  # (kind, text: None for a number, a character or END, offset)

_NUMERIC = frozenset("0123456789.-")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = "01234567"


def java_tokens(text: str, word_chars: str) -> list[Token]:
    """The tokens of `text` as StreamTokenizer reads them with these extra `word_chars`, the last
    one END."""
    tokens: list[Token] = []
    n = len(text)
    i = 0
    while True:
        while i < n and text[i] <= " ":
            i += 1
        if i >= n:
            tokens.append((END, None, i))
            return tokens
        start = i
        c = text[i]
        if c in _NUMERIC:
            if c == "-":
                i += 1
                if i >= n or not (text[i] == "." or "0" <= text[i] <= "9"):
                    tokens.append(("-", None, start))
                    continue
            seen_dot = False
            while i < n and (("0" <= text[i] <= "9") or (text[i] == "." and not seen_dot)):
                seen_dot = seen_dot or text[i] == "."
                i += 1
            tokens.append((NUMBER, None, start))
        elif _in_word(c, word_chars):
            i += 1
            while i < n and (text[i] in _NUMERIC or _in_word(text[i], word_chars)):
                i += 1
            tokens.append((WORD, text[start:i], start))
        elif c in "\"'":
            value, i = _quoted(text, i + 1, c)
            tokens.append((c, value, start))
        elif c == "/":
            if text.startswith("*", i + 1):
                end = text.find("*/", i + 2)
                if end < 0:
                    tokens.append((END, None, n))
                    return tokens
                i = end + 2
            else:
                i += 2
                while i < n and text[i] not in "\r\n":
                    i += 1
        else:
            tokens.append((c, None, start))
            i += 1


def _in_word(c: str, word_chars: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c >= "\u00a0" or c in word_chars


def _quoted(text: str, i: int, quote: str) -> tuple[str, int]:
    """The string from `i` (just after its opening quote) and where the next token starts."""
    chars: list[str] = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == quote:
            return "".join(chars), i + 1
        if c in "\r\n":
            return "".join(chars), i
        i += 1
        if c != "\\":
            chars.append(c)
        elif i >= n:
            chars.append("\uffff")  # Java's (char) -1, the end of the input read as a character
        elif text[i] in _OCTAL:
            first = text[i]
            code = int(first)
            i += 1
            if i < n and text[i] in _OCTAL:
                code = code * 8 + int(text[i])
                i += 1
                if i < n and text[i] in _OCTAL and first <= "3":
                    code = code * 8 + int(text[i])
                    i += 1
            chars.append(chr(code))
        else:
            chars.append(_ESCAPES.get(text[i], text[i]))
            i += 1
    return "".join(chars), i


def line_of(text: str, offset: int) -> int:
    """The line (from 1) of the character at `offset`: lines end at `\\n`, `\\r\\n` or `\\r`."""
    head = text[:offset]
    return head.count("\n") + head.count("\r") - head.count("\r\n") + 1


def token_name(token: Token) -> str:
    """What `token` is, for a message: never its text (a value's, perhaps a password's)."""
    kind = token[0]
    if kind == NUMBER:
        return "a number"
    if kind == END:
        return "the end"
    if kind == WORD:
        return "a word"
    if kind == '"':
        return "a string in double quotes"
    if kind == "'":
        return "a string in single quotes"
    if kind in "=;{}":
        return f"'{kind}'"
    return "a character that is neither a word's nor a quote"


def quoting_hint(word_chars: str) -> str:
    """What to write instead of a value that is not a word or a quoted string."""
    first = ", ".join(f"'{c}'" for c in word_chars if c != "-")
    return (
        'quote the value, key="value"; unquoted, a value is a word (a letter or '
        f"{first} first, then also digits, '.' and '-'): a number such as 1 or 1.5 has no text, "
        "and '/' starts a comment"
    )
