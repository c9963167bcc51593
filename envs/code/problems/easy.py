"""Easy problems: one idea, a few lines."""
from roll.envs.code.problems import function, stdio

PROBLEMS = [
    stdio(
        "sum-two", "easy", "Sum of two integers",
        "The input is one line with two integers a and b (|a|, |b| <= 10^18). Print a + b.",
        [("1 2\n", "3\n"), ("-5 5\n", "0\n"), ("1000000000000000000 1000000000000000000\n", "2000000000000000000\n"),
         ("-7 -8\n", "-15\n")],
        """
        a, b = map(int, input().split())
        print(a + b)
        """,
    ),
    function(
        "reverse-string", "easy", "Reverse a string",
        "Write `reverse_string(s: str) -> str` that returns the characters of s in reverse order.",
        ["assert reverse_string('abc') == 'cba'", "assert reverse_string('') == ''",
         "assert reverse_string('racecar') == 'racecar'", "assert reverse_string('Hello, World') == 'dlroW ,olleH'"],
        """
        def reverse_string(s):
            return s[::-1]
        """,
    ),
    function(
        "count-vowels", "easy", "Count vowels",
        "Write `count_vowels(s: str) -> int`: the number of vowels (a, e, i, o, u, either case) in s.",
        ["assert count_vowels('hello') == 2", "assert count_vowels('AEIOU aeiou') == 10",
         "assert count_vowels('rhythm') == 0", "assert count_vowels('') == 0",
         "assert count_vowels('Programming Is Fun') == 5"],
        """
        def count_vowels(s):
            return sum(c in 'aeiouAEIOU' for c in s)
        """,
    ),
    stdio(
        "fizzbuzz", "easy", "FizzBuzz",
        """
        The input is one integer n (1 <= n <= 1000). For i = 1..n print one line: "FizzBuzz" if i is a
        multiple of 15, "Fizz" if a multiple of 3, "Buzz" if a multiple of 5, else i.
        """,
        [("5\n", "1\n2\nFizz\n4\nBuzz\n"), ("1\n", "1\n"),
         ("15\n", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz\n")],
        """
        n = int(input())
        for i in range(1, n + 1):
            print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)
        """,
    ),
    stdio(
        "max-of-list", "easy", "Largest number",
        "The first line holds n (1 <= n <= 10^5), the second n integers. Print the largest of them.",
        [("3\n1 7 3\n", "7\n"), ("1\n-4\n", "-4\n"), ("5\n-1 -2 -3 -4 -5\n", "-1\n"), ("4\n9 9 2 9\n", "9\n")],
        """
        input()
        print(max(map(int, input().split())))
        """,
    ),
    function(
        "is-palindrome", "easy", "Palindrome check",
        """
        Write `is_palindrome(s: str) -> bool`: True when s reads the same forwards and backwards after
        dropping every character that is not a letter or digit and ignoring case.
        """,
        ["assert is_palindrome('A man, a plan, a canal: Panama') == True", "assert is_palindrome('race a car') == False",
         "assert is_palindrome('') == True", "assert is_palindrome('No lemon, no melon') == True",
         "assert is_palindrome('ab') == False"],
        """
        def is_palindrome(s):
            t = [c.lower() for c in s if c.isalnum()]
            return t == t[::-1]
        """,
    ),
    function(
        "factorial", "easy", "Factorial",
        "Write `factorial(n: int) -> int` for 0 <= n <= 100 (factorial(0) is 1).",
        ["assert factorial(0) == 1", "assert factorial(5) == 120", "assert factorial(10) == 3628800",
         "assert factorial(25) == 15511210043330985984000000"],
        """
        def factorial(n):
            r = 1
            for i in range(2, n + 1):
                r *= i
            return r
        """,
    ),
    stdio(
        "celsius", "easy", "Celsius to Fahrenheit",
        "The input is a temperature C in degrees Celsius (a real number). Print F = C * 9 / 5 + 32 with exactly one digit after the decimal point.",
        [("100\n", "212.0\n"), ("0\n", "32.0\n"), ("-40\n", "-40.0\n"), ("36.6\n", "97.9\n")],
        """
        c = float(input())
        print(f"{c * 9 / 5 + 32:.1f}")
        """,
    ),
    stdio(
        "even-sum", "easy", "Sum of even numbers",
        "The input is one line of integers. Print the sum of the even ones (0 if there are none).",
        [("1 2 3 4\n", "6\n"), ("1 3 5\n", "0\n"), ("-2 -4 7\n", "-6\n"), ("10\n", "10\n")],
        """
        print(sum(x for x in map(int, input().split()) if x % 2 == 0))
        """,
    ),
    stdio(
        "word-count", "easy", "Count words",
        "Print the number of words in the input, where a word is a maximal run of non-whitespace characters (the input may span several lines).",
        [("hello world\n", "2\n"), ("  spaced   out  \n\nnext line here\n", "5\n"), ("\n", "0\n"), ("one\n", "1\n")],
        """
        import sys
        print(len(sys.stdin.read().split()))
        """,
    ),
    function(
        "fibonacci", "easy", "Fibonacci numbers",
        "Write `fib(n: int) -> int` with fib(0) = 0, fib(1) = 1 and fib(n) = fib(n-1) + fib(n-2), for 0 <= n <= 200.",
        ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55", "assert fib(50) == 12586269025",
         "assert fib(100) == 354224848179261915075"],
        """
        def fib(n):
            a, b = 0, 1
            for _ in range(n):
                a, b = b, a + b
            return a
        """,
    ),
    function(
        "gcd", "easy", "Greatest common divisor",
        "Write `gcd(a: int, b: int) -> int` for non-negative a and b, not both zero.",
        ["assert gcd(12, 18) == 6", "assert gcd(7, 13) == 1", "assert gcd(0, 5) == 5", "assert gcd(100, 100) == 100",
         "assert gcd(1071, 462) == 21"],
        """
        def gcd(a, b):
            while b:
                a, b = b, a % b
            return a
        """,
    ),
    stdio(
        "leap-year", "easy", "Leap year",
        """
        The input is a year (1 <= year <= 10^9). Print YES if it is a leap year in the Gregorian calendar
        (divisible by 4, except centuries not divisible by 400), else NO.
        """,
        [("2024\n", "YES\n"), ("1900\n", "NO\n"), ("2000\n", "YES\n"), ("2023\n", "NO\n")],
        """
        y = int(input())
        print("YES" if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else "NO")
        """,
    ),
    function(
        "digit-sum", "easy", "Digit sum",
        "Write `digit_sum(n: int) -> int`: the sum of the decimal digits of |n|.",
        ["assert digit_sum(123) == 6", "assert digit_sum(0) == 0", "assert digit_sum(-987) == 24",
         "assert digit_sum(1000001) == 2"],
        """
        def digit_sum(n):
            return sum(int(d) for d in str(abs(n)))
        """,
    ),
    stdio(
        "triangle-type", "easy", "Kind of triangle",
        """
        The input is three positive integers, the side lengths. Print "invalid" if they cannot form a
        triangle with positive area, else "equilateral", "isosceles" or "scalene".
        """,
        [("3 3 3\n", "equilateral\n"), ("3 4 5\n", "scalene\n"), ("2 2 3\n", "isosceles\n"), ("1 2 3\n", "invalid\n"),
         ("5 1 1\n", "invalid\n")],
        """
        a, b, c = sorted(map(int, input().split()))
        if a + b <= c:
            print("invalid")
        elif a == c:
            print("equilateral")
        elif a == b or b == c:
            print("isosceles")
        else:
            print("scalene")
        """,
    ),
    function(
        "title-words", "easy", "Title case",
        """
        Write `title_words(s: str) -> str`: s holds words separated by single spaces; return it with the
        first letter of every word upper-case and the other letters lower-case.
        """,
        ["assert title_words('hello world') == 'Hello World'", "assert title_words('PYTHON') == 'Python'",
         "assert title_words('') == ''", "assert title_words('a bC dEF') == 'A Bc Def'"],
        """
        def title_words(s):
            return " ".join(w[:1].upper() + w[1:].lower() for w in s.split(" "))
        """,
    ),
]
