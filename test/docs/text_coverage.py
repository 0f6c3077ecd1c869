#!/usr/bin/python3
"""After moving Markdown text between files: is every fact of the old file still somewhere?

  text_coverage.py OLD.md NEW.md...

Splits OLD.md into headings, flags (`--name`), fenced code blocks, table cells and prose
sentences, and looks for each in the NEW files (whitespace, Markdown emphasis and link targets
ignored, so a sentence that became a link or lost its bullet still counts). Prints the counts per
kind and every item not found, for a person to judge (a heading renamed, a cross reference
reworded). Not a ctest: the old text exists only in history
(`git show <commit>:README.md > /tmp/old.md`).
"""

import re
import sys

FENCE = re.compile(r"^\s*(```|~~~)")


def normalize(text):
    text = re.sub(r"^#+ ", "", text, flags=re.M)  # a heading is its text
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](target) -> text
    text = text.replace("**", "").replace("\\|", "|")
    text = re.sub(r"(?<![\w*`])\*([^*]+)\*(?![\w*])", r"\1", text)  # *emphasis*
    return text.strip()


def sentence_found(sentence, corpus):
    """A sentence led by a bold title ("**Title.** text") may have become a heading and text."""
    m = re.match(r"^\*\*([^*]+?)\.\*\* (.*)$", sentence, re.S)
    if m:
        return normalize(m.group(1)) in corpus and normalize(m.group(2)) in corpus
    return normalize(sentence) in corpus


def split(markdown):
    """(headings, code blocks, table rows as cell lists, prose paragraphs) of a Markdown text."""
    headings, blocks, rows, paragraphs = [], [], [], []
    block, para = None, []

    def end_para():
        if para:
            paragraphs.append(" ".join(para))
            para.clear()

    for line in markdown.splitlines():
        if FENCE.match(line):
            if block is None:
                end_para()
                block = []
            else:
                blocks.append("\n".join(block))
                block = None
        elif block is not None:
            block.append(line)
        elif line.startswith("#"):
            end_para()
            headings.append(line.lstrip("#").strip())
        elif line.startswith("|"):
            end_para()
            if not re.match(r"^\|[-| :]+\|$", line):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
        elif not line.strip():
            end_para()
        elif re.match(r"^\s*(- |\d+\. )", line):  # a list item starts a paragraph of its own
            end_para()
            para.append(re.sub(r"^\s*(- |\d+\. )", "", line))
        else:
            para.append(line)
    end_para()
    return headings, blocks, rows, paragraphs


def sentences(paragraph):
    return [s for s in re.split(r"(?<=[.:;!?])\s+(?=[A-Z`(*\"])", paragraph) if s.strip()]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    old = open(argv[1]).read()
    new_texts = [open(p).read() for p in argv[2:]]
    corpus = normalize("\n".join(new_texts))
    new_blocks = set()
    for t in new_texts:
        new_blocks |= {b.strip() for b in split(t)[1]}

    headings, blocks, rows, paragraphs = split(old)
    flags = sorted(set(re.findall(r"`(--[a-z][\w-]*)", old)))
    cells = [c for r in rows for c in r if c]
    prose = [s for p in paragraphs for s in sentences(p)]

    checks = [
        ("headings", headings, lambda h: normalize(h) in corpus),
        ("flags", flags, lambda f: f in corpus),
        ("code blocks", blocks, lambda b: b.strip() in new_blocks),
        ("table cells", cells, lambda c: normalize(c) in corpus),
        ("prose sentences", prose, lambda s: sentence_found(s, corpus)),
    ]
    missing_total = 0
    for kind, items, found in checks:
        missing = [i for i in items if not found(i)]
        missing_total += len(missing)
        print(f"{kind}: {len(items) - len(missing)}/{len(items)} found")
        for m in missing:
            print(f"  NOT FOUND: {m[:300]}")
    return 1 if missing_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
