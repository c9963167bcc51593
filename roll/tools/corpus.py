"""The small text corpus shipped with the search tool: short reference passages, written for roll.

Each passage is (title, text). Enough for tests and a demo of retrieval-augmented episodes;
pass your own passages (or a JSONL file) to :class:`roll.tools.search.SearchTool` for a task.
"""

PASSAGES: tuple[tuple[str, str], ...] = (
    ("Boiling point of water", (
        "At sea-level pressure (101.325 kPa) pure water boils at 100 degrees Celsius, which is 212 "
        "degrees Fahrenheit. At higher altitude the pressure is lower and water boils at a lower "
        "temperature."
    )),
    ("Freezing point of water", (
        "Pure water freezes at 0 degrees Celsius (32 degrees Fahrenheit) at standard pressure. "
        "Dissolved salt lowers the freezing point, which is why roads are salted in winter."
    )),
    ("Speed of light", (
        "The speed of light in vacuum is exactly 299,792,458 metres per second. Light from the Sun "
        "takes about 8 minutes and 20 seconds to reach the Earth."
    )),
    ("Earth", (
        "The Earth is the third planet from the Sun. Its mean radius is about 6,371 kilometres and "
        "it orbits the Sun once every 365.25 days. About 71 percent of its surface is covered by "
        "water."
    )),
    ("Moon", (
        "The Moon is the Earth's only natural satellite. Its mean distance from the Earth is about "
        "384,400 kilometres and it completes one orbit in about 27.3 days."
    )),
    ("Mars", (
        "Mars is the fourth planet from the Sun. A Martian day, called a sol, lasts about 24 hours "
        "and 39 minutes. Mars has two small moons, Phobos and Deimos."
    )),
    ("Jupiter", (
        "Jupiter is the largest planet of the Solar System, with a mass more than twice that of all"
        " the other planets combined. Its Great Red Spot is a storm larger than the Earth."
    )),
    ("Mount Everest", (
        "Mount Everest, on the border of Nepal and China, is the highest mountain above sea level, "
        "with a summit at about 8,849 metres."
    )),
    ("Pacific Ocean", (
        "The Pacific is the largest and deepest ocean. Its deepest known point, the Challenger Deep"
        " in the Mariana Trench, lies about 10,900 metres below the surface."
    )),
    ("Nile", (
        "The Nile flows north through north-eastern Africa into the Mediterranean Sea. With a "
        "length of about 6,650 kilometres it is one of the two longest rivers in the world, with "
        "the Amazon."
    )),
    ("Human heart", (
        "The adult human heart beats about 60 to 100 times per minute at rest and pumps roughly 5 "
        "litres of blood per minute. It has four chambers: two atria and two ventricles."
    )),
    ("Photosynthesis", (
        "Plants, algae and some bacteria use photosynthesis to turn carbon dioxide and water into "
        "glucose and oxygen, using energy from light captured by chlorophyll."
    )),
    ("DNA", (
        "DNA is a double helix of two strands built from four bases: adenine, thymine, guanine and "
        "cytosine. Adenine pairs with thymine and guanine pairs with cytosine."
    )),
    ("Prime numbers", (
        "A prime number is a natural number greater than 1 whose only divisors are 1 and itself. "
        "The first primes are 2, 3, 5, 7, 11 and 13; 2 is the only even prime."
    )),
    ("Pi", (
        "Pi is the ratio of a circle's circumference to its diameter, about 3.14159. It is "
        "irrational: its decimal expansion never ends and never repeats."
    )),
    ("Pythagorean theorem", (
        "In a right triangle the square of the hypotenuse equals the sum of the squares of the "
        "other two sides: a^2 + b^2 = c^2. A triangle with sides 3, 4 and 5 is a right triangle."
    )),
    ("Binary numbers", (
        "The binary system writes numbers with the digits 0 and 1. Each position is a power of two,"
        " so binary 1011 is 8 + 2 + 1 = 11 in decimal. A byte holds 8 bits, 256 different values."
    )),
    ("Python language", (
        "Python is a programming language first released in 1991. It uses indentation to mark "
        "blocks, and its standard library covers files, networking, text processing and "
        "mathematics."
    )),
    ("Reinforcement learning", (
        "In reinforcement learning an agent acts in an environment, receives rewards, and learns a "
        "policy that maximises the expected sum of rewards. Policy gradient methods such as PPO and"
        " GRPO update the policy from sampled episodes."
    )),
    ("Sokoban", (
        "Sokoban is a puzzle in which a worker pushes boxes onto target squares in a warehouse. "
        "Boxes can only be pushed, never pulled, so a box pushed into a corner can no longer be "
        "moved to a target."
    )),
    ("FrozenLake", (
        "FrozenLake is a grid world in which an agent walks from the start to a goal across frozen "
        "tiles and must avoid holes in the ice. On slippery ice a move may go sideways."
    )),
    ("Great Wall of China", (
        "The Great Wall of China is a series of fortifications built over many centuries along the "
        "northern borders of historical Chinese states; its walls and trenches together exceed "
        "20,000 kilometres."
    )),
    ("Olympic Games", (
        "The modern Olympic Games were first held in Athens in 1896. Summer and Winter Games each "
        "take place every four years, two years apart."
    )),
    ("Coffee", (
        "Coffee is brewed from the roasted seeds of the Coffea plant. A typical cup holds about 80 "
        "to 100 milligrams of caffeine."
    )),
    ("Honey bees", (
        "A honey bee colony has one queen, thousands of female workers and, in summer, some male "
        "drones. Workers communicate the direction of food with a waggle dance."
    )),
)
