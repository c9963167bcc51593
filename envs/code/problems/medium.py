"""Medium problems: a standard technique or careful handling of the input."""
from roll.envs.code.problems import function, stdio

PROBLEMS = [
    function(
        "two-sum", "medium", "Two sum",
        """
        Write `two_sum(nums: list[int], target: int) -> list[int]`: the indices [i, j] with i < j and
        nums[i] + nums[j] == target. Exactly one such pair exists. len(nums) may be 10^5.
        """,
        ["assert two_sum([2, 7, 11, 15], 9) == [0, 1]", "assert two_sum([3, 2, 4], 6) == [1, 2]",
         "assert two_sum([3, 3], 6) == [0, 1]", "assert two_sum([-1, -2, -3, -4, -5], -8) == [2, 4]",
         "assert two_sum(list(range(100000)), 199997) == [99998, 99999]"],
        """
        def two_sum(nums, target):
            seen = {}
            for j, x in enumerate(nums):
                if target - x in seen:
                    return [seen[target - x], j]
                seen[x] = j
        """,
    ),
    function(
        "balanced-brackets", "medium", "Balanced brackets",
        """
        Write `is_balanced(s: str) -> bool`: True when the brackets (), [] and {} in s are balanced and
        properly nested. Other characters are ignored.
        """,
        ["assert is_balanced('([]{})') == True", "assert is_balanced('([)]') == False", "assert is_balanced('') == True",
         "assert is_balanced('a(b[c]d)e') == True", "assert is_balanced('((') == False", "assert is_balanced('}') == False"],
        """
        def is_balanced(s):
            pairs = {')': '(', ']': '[', '}': '{'}
            stack = []
            for c in s:
                if c in '([{':
                    stack.append(c)
                elif c in pairs:
                    if not stack or stack.pop() != pairs[c]:
                        return False
            return not stack
        """,
    ),
    stdio(
        "anagram-groups", "medium", "Anagram groups",
        """
        The input is one line of lower-case words separated by spaces. Two words are in the same group
        when one is an anagram of the other. Print the number of groups.
        """,
        [("eat tea tan ate nat bat\n", "3\n"), ("abc\n", "1\n"), ("ab ba ab\n", "1\n"), ("a b c d\n", "4\n")],
        """
        print(len({"".join(sorted(w)) for w in input().split()}))
        """,
    ),
    function(
        "run-length", "medium", "Run-length encoding",
        """
        Write `rle(s: str) -> str`: each maximal run of one character becomes the character followed by
        the run length, e.g. "aaabcc" -> "a3b1c2".
        """,
        ["assert rle('aaabcc') == 'a3b1c2'", "assert rle('') == ''", "assert rle('z') == 'z1'",
         "assert rle('aaaaaaaaaaaa') == 'a12'", "assert rle('abab') == 'a1b1a1b1'"],
        """
        def rle(s):
            out = []
            i = 0
            while i < len(s):
                j = i
                while j < len(s) and s[j] == s[i]:
                    j += 1
                out.append(f"{s[i]}{j - i}")
                i = j
            return "".join(out)
        """,
    ),
    stdio(
        "primes-up-to", "medium", "Primes up to n",
        "The input is n (0 <= n <= 10^6). Print the primes <= n in increasing order, separated by spaces (an empty line if there are none).",
        [("10\n", "2 3 5 7\n"), ("1\n", "\n"), ("2\n", "2\n"), ("30\n", "2 3 5 7 11 13 17 19 23 29\n")],
        """
        n = int(input())
        sieve = bytearray([1]) * (n + 1)
        sieve[:2] = b"\\x00\\x00"[: n + 1]
        for i in range(2, int(n ** 0.5) + 1):
            if sieve[i]:
                sieve[i * i:: i] = bytearray(len(range(i * i, n + 1, i)))
        print(" ".join(str(i) for i in range(n + 1) if sieve[i]))
        """,
    ),
    stdio(
        "transpose", "medium", "Transpose a matrix",
        "The first line holds r and c; then r lines of c integers. Print the c x r transpose, one row per line, numbers separated by spaces.",
        [("2 3\n1 2 3\n4 5 6\n", "1 4\n2 5\n3 6\n"), ("1 1\n7\n", "7\n"), ("3 1\n1\n2\n3\n", "1 2 3\n")],
        """
        r, c = map(int, input().split())
        m = [input().split() for _ in range(r)]
        for j in range(c):
            print(" ".join(m[i][j] for i in range(r)))
        """,
    ),
    function(
        "roman-to-int", "medium", "Roman numerals to integers",
        "Write `roman_to_int(s: str) -> int` for valid Roman numerals from I to MMMCMXCIX (1..3999).",
        ["assert roman_to_int('III') == 3", "assert roman_to_int('LVIII') == 58", "assert roman_to_int('MCMXCIV') == 1994",
         "assert roman_to_int('MMMCMXCIX') == 3999", "assert roman_to_int('XLIX') == 49"],
        """
        def roman_to_int(s):
            v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}
            total = 0
            for i, c in enumerate(s):
                if i + 1 < len(s) and v[c] < v[s[i + 1]]:
                    total -= v[c]
                else:
                    total += v[c]
            return total
        """,
    ),
    function(
        "int-to-roman", "medium", "Integers to Roman numerals",
        "Write `int_to_roman(n: int) -> str` for 1 <= n <= 3999, using subtractive forms (IV, IX, XL, XC, CD, CM).",
        ["assert int_to_roman(3) == 'III'", "assert int_to_roman(1994) == 'MCMXCIV'", "assert int_to_roman(3999) == 'MMMCMXCIX'",
         "assert int_to_roman(444) == 'CDXLIV'", "assert int_to_roman(9) == 'IX'"],
        """
        def int_to_roman(n):
            table = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),
                     (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]
            out = []
            for value, sym in table:
                while n >= value:
                    out.append(sym)
                    n -= value
            return "".join(out)
        """,
    ),
    function(
        "merge-intervals", "medium", "Merge intervals",
        """
        Write `merge_intervals(intervals: list[list[int]]) -> list[list[int]]`: merge overlapping closed
        intervals [a, b] (touching ones like [1, 2] and [2, 3] overlap) and return them sorted by start.
        """,
        ["assert merge_intervals([[1, 3], [2, 6], [8, 10], [15, 18]]) == [[1, 6], [8, 10], [15, 18]]",
         "assert merge_intervals([[1, 4], [4, 5]]) == [[1, 5]]", "assert merge_intervals([]) == []",
         "assert merge_intervals([[5, 6], [1, 2]]) == [[1, 2], [5, 6]]",
         "assert merge_intervals([[1, 10], [2, 3], [4, 5]]) == [[1, 10]]"],
        """
        def merge_intervals(intervals):
            out = []
            for a, b in sorted(intervals):
                if out and a <= out[-1][1]:
                    out[-1][1] = max(out[-1][1], b)
                else:
                    out.append([a, b])
            return out
        """,
    ),
    stdio(
        "binary-search", "medium", "Find positions",
        """
        The first line holds n, then a line of n distinct integers in increasing order, then q, then a
        line of q integers. For each query print its 0-based position in the list, or -1, one per line.
        n and q may be 10^5.
        """,
        [("5\n1 3 5 7 9\n3\n3 4 9\n", "1\n-1\n4\n"), ("1\n10\n2\n10 11\n", "0\n-1\n"),
         ("4\n-5 -2 0 8\n4\n-5 8 0 1\n", "0\n3\n2\n-1\n")],
        """
        import sys
        data = sys.stdin.read().split()
        n = int(data[0])
        pos = {int(x): i for i, x in enumerate(data[1:1 + n])}
        q = int(data[1 + n])
        print("\\n".join(str(pos.get(int(x), -1)) for x in data[2 + n:2 + n + q]))
        """,
    ),
    function(
        "common-prefix", "medium", "Longest common prefix",
        "Write `lcp(words: list[str]) -> str`: the longest common prefix of all words ('' for an empty list).",
        ["assert lcp(['flower', 'flow', 'flight']) == 'fl'", "assert lcp(['dog', 'racecar', 'car']) == ''",
         "assert lcp([]) == ''", "assert lcp(['same', 'same']) == 'same'", "assert lcp(['a']) == 'a'"],
        """
        def lcp(words):
            if not words:
                return ""
            lo, hi = min(words), max(words)
            i = 0
            while i < len(lo) and lo[i] == hi[i]:
                i += 1
            return lo[:i]
        """,
    ),
    stdio(
        "word-frequency", "medium", "Word frequency",
        """
        A word is a maximal run of ASCII letters; compare words in lower case. For every distinct word of
        the input print "word count", most frequent first, ties in alphabetical order.
        """,
        [("the cat and the hat\n", "the 2\nand 1\ncat 1\nhat 1\n"), ("Go, go! GO?\n", "go 3\n"),
         ("b a\nb a c\n", "a 2\nb 2\nc 1\n")],
        """
        import re
        import sys
        from collections import Counter
        counts = Counter(w.lower() for w in re.findall(r"[A-Za-z]+", sys.stdin.read()))
        for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(word, n)
        """,
    ),
    function(
        "spiral", "medium", "Spiral order",
        "Write `spiral(matrix: list[list[int]]) -> list[int]`: the elements in clockwise spiral order starting at the top-left.",
        ["assert spiral([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == [1, 2, 3, 6, 9, 8, 7, 4, 5]",
         "assert spiral([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]) == [1, 2, 3, 4, 8, 12, 11, 10, 9, 5, 6, 7]",
         "assert spiral([]) == []", "assert spiral([[1], [2], [3]]) == [1, 2, 3]", "assert spiral([[7]]) == [7]"],
        """
        def spiral(matrix):
            out = []
            m = [list(r) for r in matrix]
            while m:
                out += m.pop(0)
                m = [list(r) for r in zip(*m)][::-1]
            return out
        """,
    ),
    stdio(
        "caesar", "medium", "Caesar cipher",
        """
        The first line holds a shift k (-1000 <= k <= 1000), the second a line of text. Shift every ASCII
        letter k places forward in the alphabet (wrapping around, keeping case); leave other characters.
        """,
        [("3\nHello, World!\n", "Khoor, Zruog!\n"), ("-1\nabc XYZ\n", "zab WXY\n"), ("26\nSame\n", "Same\n"),
         ("1000\nz\n", "l\n")],
        """
        k = int(input())
        text = input()
        out = []
        for c in text:
            if "a" <= c <= "z":
                out.append(chr((ord(c) - 97 + k) % 26 + 97))
            elif "A" <= c <= "Z":
                out.append(chr((ord(c) - 65 + k) % 26 + 65))
            else:
                out.append(c)
        print("".join(out))
        """,
    ),
    stdio(
        "stack-machine", "medium", "Stack machine",
        """
        Each input line is a command for a stack of integers: PUSH x, POP, ADD (pop two, push their sum),
        MUL (pop two, push their product), DUP (push a copy of the top) or PRINT (print the top). A command
        that needs more items than the stack holds prints ERROR and changes nothing.
        """,
        [("PUSH 2\nPUSH 3\nADD\nPRINT\n", "5\n"), ("POP\nPRINT\nPUSH 4\nDUP\nMUL\nPRINT\n", "ERROR\nERROR\n16\n"),
         ("PUSH -2\nADD\nPRINT\n", "ERROR\n-2\n")],
        """
        import sys
        stack = []
        need = {"POP": 1, "ADD": 2, "MUL": 2, "DUP": 1, "PRINT": 1, "PUSH": 0}
        for line in sys.stdin.read().splitlines():
            parts = line.split()
            if not parts:
                continue
            op = parts[0]
            if len(stack) < need[op]:
                print("ERROR")
            elif op == "PUSH":
                stack.append(int(parts[1]))
            elif op == "POP":
                stack.pop()
            elif op == "ADD":
                stack.append(stack.pop() + stack.pop())
            elif op == "MUL":
                stack.append(stack.pop() * stack.pop())
            elif op == "DUP":
                stack.append(stack[-1])
            else:
                print(stack[-1])
        """,
    ),
    function(
        "kth-largest", "medium", "k-th largest",
        "Write `kth_largest(nums: list[int], k: int) -> int`: the k-th largest element (1-based, counting duplicates).",
        ["assert kth_largest([3, 2, 1, 5, 6, 4], 2) == 5", "assert kth_largest([3, 2, 3, 1, 2, 4, 5, 5, 6], 4) == 4",
         "assert kth_largest([1], 1) == 1", "assert kth_largest([-1, -1], 2) == -1"],
        """
        import heapq

        def kth_largest(nums, k):
            return heapq.nlargest(k, nums)[-1]
        """,
    ),
]
