"""Hard problems: a classic algorithm, some with inputs large enough to rule out brute force."""
from roll.envs.code.problems import function, stdio

# Large inputs whose answers are known in closed form (so no solver wrote the expected output).
_N = 100_000
_INCREASING = f"{_N}\n{' '.join(str(i) for i in range(1, _N + 1))}\n"
_DECREASING = f"{_N}\n{' '.join(str(i) for i in range(_N, 0, -1))}\n"
_CHAIN = f"{_N} {_N - 1}\n" + "".join(f"{i} {i + 1} 1\n" for i in range(1, _N))
_CHAIN_ANSWER = " ".join(str(i) for i in range(_N)) + "\n"

PROBLEMS = [
    stdio(
        "lis", "hard", "Longest increasing subsequence",
        "The first line holds n (1 <= n <= 10^5), the second n integers. Print the length of the longest strictly increasing subsequence.",
        [("6\n10 9 2 5 3 7\n", "3\n"), ("8\n0 8 4 12 2 10 6 14\n", "4\n"), ("3\n5 5 5\n", "1\n"),
         (_INCREASING, f"{_N}\n"), (_DECREASING, "1\n")],
        """
        import bisect
        input()
        tails = []
        for x in map(int, input().split()):
            i = bisect.bisect_left(tails, x)
            if i == len(tails):
                tails.append(x)
            else:
                tails[i] = x
        print(len(tails))
        """,
    ),
    function(
        "edit-distance", "hard", "Edit distance",
        "Write `edit_distance(a: str, b: str) -> int`: the fewest single-character insertions, deletions and substitutions that turn a into b (strings up to 1000 characters).",
        ["assert edit_distance('kitten', 'sitting') == 3", "assert edit_distance('', 'abc') == 3",
         "assert edit_distance('flaw', 'lawn') == 2", "assert edit_distance('same', 'same') == 0",
         "assert edit_distance('a' * 500, 'b' * 500) == 500", "assert edit_distance('intention', 'execution') == 5"],
        """
        def edit_distance(a, b):
            prev = list(range(len(b) + 1))
            for i, ca in enumerate(a, 1):
                cur = [i] + [0] * len(b)
                for j, cb in enumerate(b, 1):
                    cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
                prev = cur
            return prev[-1]
        """,
    ),
    stdio(
        "grid-path", "hard", "Shortest path in a grid",
        """
        The first line holds r and c, then r lines of c characters: '.' free, '#' wall, 'S' start, 'E' end.
        Moving up, down, left or right to a free cell costs one step. Print the fewest steps from S to E,
        or -1 when E cannot be reached.
        """,
        [("3 4\nS..#\n.#..\n...E\n", "5\n"), ("2 2\nS#\n#E\n", "-1\n"), ("1 2\nSE\n", "1\n"),
         ("5 5\nS.#..\n.##.#\n...#.\n##...\n...#E\n", "8\n")],
        """
        from collections import deque
        r, c = map(int, input().split())
        g = [input() for _ in range(r)]
        start = next((i, j) for i in range(r) for j in range(c) if g[i][j] == "S")
        dist = {start: 0}
        q = deque([start])
        answer = -1
        while q:
            i, j = q.popleft()
            if g[i][j] == "E":
                answer = dist[(i, j)]
                break
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                ni, nj = i + di, j + dj
                if 0 <= ni < r and 0 <= nj < c and g[ni][nj] != "#" and (ni, nj) not in dist:
                    dist[(ni, nj)] = dist[(i, j)] + 1
                    q.append((ni, nj))
        print(answer)
        """,
    ),
    function(
        "coin-change", "hard", "Coin change",
        "Write `min_coins(coins: list[int], amount: int) -> int`: the fewest coins (unlimited supply of each value) summing to amount, or -1 if impossible (amount up to 10^4).",
        ["assert min_coins([1, 2, 5], 11) == 3", "assert min_coins([2], 3) == -1", "assert min_coins([1], 0) == 0",
         "assert min_coins([1, 3, 4], 6) == 2", "assert min_coins([186, 419, 83, 408], 6249) == 20",
         "assert min_coins([7, 11], 10000) == 912"],
        """
        def min_coins(coins, amount):
            inf = float("inf")
            best = [0] + [inf] * amount
            for a in range(1, amount + 1):
                for c in coins:
                    if c <= a and best[a - c] + 1 < best[a]:
                        best[a] = best[a - c] + 1
            return -1 if best[amount] == inf else best[amount]
        """,
    ),
    stdio(
        "knapsack", "hard", "0/1 knapsack",
        "The first line holds n and W (n <= 100, W <= 10^4), then n lines with a weight and a value. Print the largest total value of items with total weight <= W, each item used at most once.",
        [("3 50\n10 60\n20 100\n30 120\n", "220\n"), ("1 5\n6 10\n", "0\n"), ("4 7\n1 1\n3 4\n4 5\n5 7\n", "9\n"),
         ("2 10\n5 10\n5 10\n", "20\n")],
        """
        n, w = map(int, input().split())
        best = [0] * (w + 1)
        for _ in range(n):
            wt, val = map(int, input().split())
            for cap in range(w, wt - 1, -1):
                best[cap] = max(best[cap], best[cap - wt] + val)
        print(best[w])
        """,
    ),
    stdio(
        "topo-order", "hard", "Topological order",
        """
        The first line holds n and m: nodes 1..n and m directed edges, then m lines "u v" (u before v).
        Print the lexicographically smallest order of all nodes that respects every edge, separated by
        spaces, or CYCLE if there is none.
        """,
        [("4 3\n1 2\n1 3\n3 2\n", "1 3 2 4\n"), ("3 3\n1 2\n2 3\n3 1\n", "CYCLE\n"), ("3 0\n", "1 2 3\n"),
         ("5 4\n5 1\n4 1\n3 2\n2 1\n", "3 2 4 5 1\n")],
        """
        import heapq
        import sys
        data = sys.stdin.read().split()
        n, m = int(data[0]), int(data[1])
        adj = [[] for _ in range(n + 1)]
        indeg = [0] * (n + 1)
        for k in range(m):
            u, v = int(data[2 + 2 * k]), int(data[3 + 2 * k])
            adj[u].append(v)
            indeg[v] += 1
        heap = [i for i in range(1, n + 1) if indeg[i] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            u = heapq.heappop(heap)
            order.append(u)
            for v in adj[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(heap, v)
        print(" ".join(map(str, order)) if len(order) == n else "CYCLE")
        """,
    ),
    function(
        "count-islands", "hard", "Count islands",
        "Write `count_islands(grid: list[str]) -> int`: the number of 4-connected groups of '1' cells in a grid of '0' and '1' strings (up to 300 x 300).",
        ["assert count_islands(['11000', '11000', '00100', '00011']) == 3", "assert count_islands([]) == 0",
         "assert count_islands(['0']) == 0", "assert count_islands(['101', '010', '101']) == 5",
         "assert count_islands(['1' * 300] * 300) == 1"],
        """
        def count_islands(grid):
            seen = set()
            count = 0
            for i, row in enumerate(grid):
                for j, ch in enumerate(row):
                    if ch != '1' or (i, j) in seen:
                        continue
                    count += 1
                    seen.add((i, j))
                    stack = [(i, j)]
                    while stack:
                        a, b = stack.pop()
                        for x, y in ((a + 1, b), (a - 1, b), (a, b + 1), (a, b - 1)):
                            if 0 <= x < len(grid) and 0 <= y < len(grid[x]) and grid[x][y] == '1' and (x, y) not in seen:
                                seen.add((x, y))
                                stack.append((x, y))
            return count
        """,
    ),
    function(
        "evaluate", "hard", "Evaluate an expression",
        """
        Write `evaluate(expr: str) -> int`: the value of an expression of non-negative integers, +, -, *,
        parentheses and spaces, with the usual precedence (* before + and -, left to right). Do not use
        eval.
        """,
        ["assert evaluate('1 + 2 * 3') == 7", "assert evaluate('(1 + 2) * 3') == 9", "assert evaluate('10 - 4 - 3') == 3",
         "assert evaluate('2 * (3 + 4) * 5 - 6') == 64", "assert evaluate('42') == 42",
         "assert evaluate('((7))-(2*(1+1))') == 3"],
        """
        def evaluate(expr):
            tokens = []
            i = 0
            while i < len(expr):
                c = expr[i]
                if c.isdigit():
                    j = i
                    while j < len(expr) and expr[j].isdigit():
                        j += 1
                    tokens.append(int(expr[i:j]))
                    i = j
                    continue
                if c in "+-*()":
                    tokens.append(c)
                i += 1
            pos = 0

            def atom():
                nonlocal pos
                tok = tokens[pos]
                pos += 1
                if tok == "(":
                    value = expression()
                    pos += 1  # the closing parenthesis
                    return value
                return tok

            def term():
                nonlocal pos
                value = atom()
                while pos < len(tokens) and tokens[pos] == "*":
                    pos += 1
                    value *= atom()
                return value

            def expression():
                nonlocal pos
                value = term()
                while pos < len(tokens) and tokens[pos] in "+-":
                    op = tokens[pos]
                    pos += 1
                    value = value + term() if op == "+" else value - term()
                return value

            return expression()
        """,
    ),
    stdio(
        "dijkstra", "hard", "Shortest distances",
        """
        The first line holds n and m, then m lines "u v w": an undirected road between towns u and v
        (1-based) of length w >= 0. Print the shortest distance from town 1 to towns 1..n on one line,
        separated by spaces, -1 for unreachable towns. n and m may be 10^5.
        """,
        [("4 4\n1 2 1\n2 3 2\n1 3 5\n3 4 1\n", "0 1 3 4\n"), ("3 1\n1 2 7\n", "0 7 -1\n"), ("1 0\n", "0\n"),
         (_CHAIN, _CHAIN_ANSWER)],
        """
        import heapq
        import sys
        data = sys.stdin.buffer.read().split()
        n, m = int(data[0]), int(data[1])
        adj = [[] for _ in range(n + 1)]
        for k in range(m):
            u, v, w = int(data[2 + 3 * k]), int(data[3 + 3 * k]), int(data[4 + 3 * k])
            adj[u].append((v, w))
            adj[v].append((u, w))
        dist = [-1] * (n + 1)
        heap = [(0, 1)]
        while heap:
            d, u = heapq.heappop(heap)
            if dist[u] != -1:
                continue
            dist[u] = d
            for v, w in adj[u]:
                if dist[v] == -1:
                    heapq.heappush(heap, (d + w, v))
        print(" ".join(map(str, dist[1:])))
        """,
    ),
    function(
        "n-queens", "hard", "N queens",
        "Write `n_queens(n: int) -> int`: the number of ways to place n non-attacking queens on an n x n board (1 <= n <= 10).",
        ["assert n_queens(1) == 1", "assert n_queens(4) == 2", "assert n_queens(2) == 0", "assert n_queens(6) == 4",
         "assert n_queens(8) == 92", "assert n_queens(10) == 724"],
        """
        def n_queens(n):
            def place(row, cols, d1, d2):
                if row == n:
                    return 1
                total = 0
                for c in range(n):
                    if c not in cols and row - c not in d1 and row + c not in d2:
                        total += place(row + 1, cols | {c}, d1 | {row - c}, d2 | {row + c})
                return total
            return place(0, frozenset(), frozenset(), frozenset())
        """,
    ),
    function(
        "longest-palindrome", "hard", "Longest palindromic substring",
        "Write `longest_palindrome(s: str) -> int`: the length of the longest substring of s that is a palindrome (len(s) <= 2000).",
        ["assert longest_palindrome('babad') == 3", "assert longest_palindrome('cbbd') == 2", "assert longest_palindrome('') == 0",
         "assert longest_palindrome('a') == 1", "assert longest_palindrome('forgeeksskeegfor') == 10",
         "assert longest_palindrome('ab' * 500) == 999"],
        """
        def longest_palindrome(s):
            best = 0
            for center in range(2 * len(s) - 1):
                lo, hi = center // 2, center // 2 + center % 2
                while lo >= 0 and hi < len(s) and s[lo] == s[hi]:
                    lo -= 1
                    hi += 1
                best = max(best, hi - lo - 1)
            return best
        """,
    ),
]
